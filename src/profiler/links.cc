// Link measurement of the profiler (`harp profile links`, profiler.h): two ranks as
// threads over the runtime's c10d transport, a ping-pong per size and an all-reduce,
// fitted as latency + bytes / bandwidth.
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harp/profiler/profiler.h"
#include "harp/runtime/comm/comm.h"
#include "harp/runtime/comm/rendezvous.h"

namespace harp::profiler {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

LinkFit fit(std::vector<std::pair<double, double>> points) {
  LinkFit f;
  f.points = points;
  const double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  const double slope = den > 0 ? (n * sxy - sx * sy) / den : 0;
  f.latency_s = std::max(0.0, (sy - slope * sx) / n);
  f.bytes_per_s = slope > 0 ? 1.0 / slope : 0;
  return f;
}

}  // namespace

LinkReport measure_links(const std::vector<double>& sizes_bytes, const MeasureOptions& options) {
  HARP_CHECK(!sizes_bytes.empty());
  auto store = runtime::hash_store();
  const auto timeout = std::chrono::milliseconds(30000);
  std::vector<std::vector<double>> roundtrip(sizes_bytes.size()), reduce(sizes_bytes.size());
  std::vector<double> small_rt;
  std::string failure;
  std::mutex mu;
  auto rank_main = [&](int rank) {
    try {
      runtime::RankLayout l;
      l.rank = rank;
      l.world_size = 2;
      l.stage = rank;
      l.stage_ranks = {{0}, {1}};
      l.rank_device = {0, 1};
      auto t = runtime::C10dTransport::create(store, l, timeout, false);
      const int peer = 1 - rank;
      const int reps = options.warmup + std::max(options.min_repeats, 10);
      auto pingpong = [&](torch::Tensor& big, torch::Tensor& small) {
        if (rank == 0) {
          t->isend(big, peer, 0, "links").wait(timeout);
          t->irecv(small, peer, 1, "links").wait(timeout);
        } else {
          t->irecv(big, peer, 0, "links").wait(timeout);
          t->isend(small, peer, 1, "links").wait(timeout);
        }
      };
      torch::Tensor small = torch::zeros({1});
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        pingpong(small, small);
        if (rank == 0 && r >= options.warmup) small_rt.push_back(seconds_since(t0));
      }
      for (size_t i = 0; i < sizes_bytes.size(); ++i) {
        torch::Tensor big = torch::zeros({static_cast<std::int64_t>(sizes_bytes[i] / 4)});
        for (int r = 0; r < reps; ++r) {
          t->barrier("links");
          auto t0 = Clock::now();
          pingpong(big, small);
          const double rt = seconds_since(t0);
          t->barrier("links");
          t0 = Clock::now();
          t->allreduce_world(big, "links");
          const double ar = seconds_since(t0);
          if (rank == 0 && r >= options.warmup) {
            roundtrip[i].push_back(rt);
            reduce[i].push_back(ar);
          }
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) failure = std::string("rank ") + std::to_string(rank) + ": " + e.what();
    }
  };
  std::thread peer(rank_main, 1);
  rank_main(0);
  peer.join();
  if (!failure.empty()) throw runtime::RuntimeFailure(failure.substr(0, failure.find('\n')));
  const double small_one_way = summarize(small_rt).median_s / 2;
  std::vector<std::pair<double, double>> p2p, ar;
  for (size_t i = 0; i < sizes_bytes.size(); ++i) {
    p2p.emplace_back(sizes_bytes[i], std::max(0.0, summarize(roundtrip[i]).median_s - small_one_way));
    ar.emplace_back(sizes_bytes[i], summarize(reduce[i]).median_s);
  }
  LinkReport report;
  report.p2p = fit(p2p);
  report.p2p.latency_s = small_one_way;  // the fit's intercept is noisier than the ping-pong
  report.allreduce = fit(ar);
  return report;
}

}  // namespace harp::profiler
