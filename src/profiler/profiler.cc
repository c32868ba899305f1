// The measurement side of the Zero-Redundant Profiler (see profiler.h).
#include "harp/profiler/profiler.h"
#include "harp/runtime/nn/precision.h"

#include <torch/cuda.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <thread>


#include "harp/common/check.h"
#include "harp/profile/unique_layers.h"
#include "harp/runtime/comm/comm.h"
#include "harp/runtime/comm/rendezvous.h"
#include "harp/runtime/exec/emulation.h"
#include "harp/runtime/nn/gpt.h"
#include "harp/runtime/nn/weight_grad.h"
#include "harp/runtime/exec/memory.h"
#include "harp/runtime/exec/device.h"


namespace harp::profiler {
namespace {

using Clock = std::chrono::steady_clock;


double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Inputs of a range starting at `first`: token ids for the head, else the cut tensor of
// the layer before (a leaf that requires grad, as the runtime's received tensors are).
torch::Tensor range_input(const model::ModelSpec& model, int first, int samples, torch::Dtype dtype) {
  const auto& g = model.gpt;
  if (first == 0) return torch::randint(0, g.vocab, {samples, g.seq_len}, torch::kInt64);
  std::vector<std::int64_t> shape = {samples};
  const auto& cut = model.layers[first - 1].output_shape;
  shape.insert(shape.end(), cut.begin(), cut.end());
  return torch::randn(shape, torch::TensorOptions().dtype(dtype)).requires_grad_(true);
}

// Pushes this core's private caches' contents out (writes a buffer several times the
// L2 size), so a layer measured in a loop starts as it does inside a stage: its weights
// and activations are no longer in the core's caches after the other layers ran.
void evict_private_caches() {
  static std::vector<char> buffer = [] {
    size_t l2 = 1 << 20;
    if (FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r")) {
      unsigned kib = 0;
      if (std::fscanf(f, "%uK", &kib) == 1 && kib > 0) l2 = static_cast<size_t>(kib) << 10;
      std::fclose(f);
    }
    return std::vector<char>(4 * l2, 1);
  }();
  volatile char sink = 0;
  for (size_t i = 0; i < buffer.size(); i += 64) {
    buffer[i] = static_cast<char>(buffer[i] + 1);
    sink = static_cast<char>(sink + buffer[i]);
  }
  (void)sink;
}

double tensor_bytes(const torch::Tensor& t) {
  return t.defined() ? static_cast<double>(t.numel()) * static_cast<double>(t.element_size()) : 0.0;
}

}  // namespace

Timing summarize(std::vector<double> samples) {
  HARP_CHECK(!samples.empty());
  std::sort(samples.begin(), samples.end());
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(samples.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
  };
  Timing t;
  t.median_s = quantile(0.5);
  t.spread = t.median_s > 0 ? (quantile(0.75) - quantile(0.25)) / 2 / t.median_s : 0;
  t.repeats = static_cast<int>(samples.size());
  return t;
}

Measurement measure_range(const model::ModelSpec& model, int first, int last, int samples,
                          torch::Dtype dtype, const MeasureOptions& options) {
  HARP_CHECK(0 <= first && first < last && last <= model.num_layers()) << first << ".." << last;
  HARP_CHECK(samples >= 1);
  runtime::install_counting_allocator();
  const torch::Device device = options.compute;
  std::vector<runtime::GptLayer> layers =
      runtime::build_gpt_layers(model, first, last, 1234, runtime::param_dtype(dtype), device);
  const bool tail = layers.back()->layer().kind == model::LayerKind::kTail;
  const auto& g = model.gpt;
  torch::Tensor input = range_input(model, first, samples, dtype);
  if (!device.is_cpu()) input = input.to(device).detach().requires_grad_(input.requires_grad());
  torch::Tensor targets = tail ? torch::randint(0, g.vocab, {samples, g.seq_len}, torch::kInt64) : torch::Tensor();
  if (tail && !device.is_cpu()) targets = targets.to(device);
  auto done = [&] {  // the device's queued work finished (CUDA runs behind the host)
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  const double tokens = static_cast<double>(samples) * static_cast<double>(g.seq_len);
  torch::Tensor dy;

  Measurement m;
  for (const auto& [name, p] : runtime::named_parameters(layers)) m.param_bytes += tensor_bytes(p);
  std::vector<double> fwd, bwd, wgt;
  runtime::WeightGradQueue queue;  // the layers' weight products, timed apart
  const auto start = Clock::now();
  for (int run = 0;; ++run) {
    const bool timed = run >= options.warmup;
    const bool count_bytes = run == options.warmup;
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
    const double base = runtime::live_tensor_bytes();
    if (options.evict_caches) evict_private_caches();
    runtime::reset_peak_tensor_bytes();
    // As the executor times an emulated device (runtime/emulation.h).
    runtime::ComputeStart c0 = runtime::start_compute();
    auto t0 = c0.wall;
    torch::Tensor y = input;
    {
      runtime::AutocastGuard autocast(dtype, device);  // as the executor's forward
      runtime::DeferWeightGrads defer(&queue);         // as a split backward's
      for (auto& layer : layers)
        y = layer->layer().kind == model::LayerKind::kTail ? layer->forward(y, targets) : layer->forward(y);
    }
    if (tail) (void)y.item<double>();  // the runtime reads the loss sum here
    done();
    runtime::finish_emulated_compute(c0, options.emulated_slowdown);
    const double f = seconds_since(t0);
    if (count_bytes) {
      m.activation_bytes = runtime::live_tensor_bytes() - base;
      m.output_bytes = tail ? 0.0 : tensor_bytes(y);
    }
    if (!tail && !dy.defined()) dy = torch::randn_like(y);  // y's dtype: what the executor's wire casts to
    if (options.evict_caches) evict_private_caches();
    c0 = runtime::start_compute();
    t0 = c0.wall;
    if (tail)
      (y / tokens).backward();
    else
      torch::autograd::backward({y}, {dy});
    done();
    runtime::finish_emulated_compute(c0, options.emulated_slowdown);
    const double i = seconds_since(t0);
    c0 = runtime::start_compute();
    t0 = c0.wall;
    queue.run();
    done();
    runtime::finish_emulated_compute(c0, options.emulated_slowdown);
    const double w = seconds_since(t0), b = i + w;
    if (count_bytes) m.peak_bytes = runtime::peak_tensor_bytes() - base;
    y = torch::Tensor();
    if (!timed) continue;
    fwd.push_back(f);
    bwd.push_back(b);
    wgt.push_back(w);
    const int n = static_cast<int>(fwd.size());
    if (n >= options.max_repeats || (n >= 3 && seconds_since(start) > options.max_seconds)) break;
    if (n >= options.min_repeats) {
      m.fwd = summarize(fwd);
      m.bwd = summarize(bwd);
      if (m.fwd.spread <= options.target_spread && m.bwd.spread <= options.target_spread) break;
    }
  }
  m.fwd = summarize(fwd);
  m.bwd = summarize(bwd);
  m.wgt = summarize(wgt);
  return m;
}

double measure_optimizer_s_per_param_byte(const model::ModelSpec& model, torch::Dtype dtype,
                                          const MeasureOptions& options) {
  std::vector<std::pair<std::string, torch::Tensor>> params;  // the tensors outlive their layers
  double spec_bytes = 0;
  for (const auto& group : profile::unique_layers(model)) {
    const int i = group.representative;
    auto layers = runtime::build_gpt_layers(model, i, i + 1, 1234, runtime::param_dtype(dtype), options.compute);
    for (auto& [name, p] : runtime::named_parameters(layers)) {
      p.mutable_grad() = torch::randn_like(p) * 1e-3;
      params.emplace_back(name, p);
    }
    spec_bytes += model.layers[i].param_bytes;
  }
  runtime::AdamW opt(params, runtime::OptimConfig{});
  const std::vector<bool> count(params.size(), true);
  std::vector<double> times;
  const auto start = Clock::now();
  for (int run = 0; run < options.warmup + options.max_repeats; ++run) {
    const auto t0 = Clock::now();
    const double norm = std::sqrt(opt.grad_squared_norm(count));
    opt.step(run, opt.clip_scale(norm));
    if (options.compute.is_cuda()) torch::cuda::synchronize(options.compute.index());
    const double t = seconds_since(t0);
    if (run < options.warmup) continue;
    times.push_back(t);
    const int n = static_cast<int>(times.size());
    if (n >= options.min_repeats && (summarize(times).spread <= options.target_spread ||
                                     seconds_since(start) > options.max_seconds))
      break;
  }
  return spec_bytes > 0 ? summarize(times).median_s / spec_bytes : 0.0;
}

namespace {

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string dtype_name(torch::Dtype d) {
  return d == torch::kFloat64 ? "float64" : d == torch::kBFloat16 ? "bfloat16" : d == torch::kHalf ? "float16" : "float32";
}

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100);
  return buf;
}

}  // namespace

ProfileReport profile_model(const model::ModelSpec& model, const ProfileRequest& request,
                            const ProgressFn& progress) {
  HARP_CHECK(request.emulated_slowdown >= 1.0);
  runtime::install_counting_allocator();
  runtime::set_compute_threads(request.threads, request.dtype);
  const auto start = Clock::now();
  ProfileReport report;
  report.layers = model.num_layers();
  const std::vector<profile::LayerGroup> groups = profile::unique_layers(model);
  report.unique = static_cast<int>(groups.size());
  // The layers to measure: one per signature, or all of them.
  std::vector<int> todo;
  for (const auto& g : groups) {
    if (request.deduplicate)
      todo.push_back(g.representative);
    else
      todo.insert(todo.end(), g.layers.begin(), g.layers.end());
  }
  std::sort(todo.begin(), todo.end());
  const double f = request.emulated_slowdown;
  MeasureOptions options = request.options;
  options.emulated_slowdown = f;
  for (int mbs : request.microbatch_sizes) {
    for (size_t n = 0; n < todo.size(); ++n) {
      const int i = todo[n];
      Measurement m = measure_range(model, i, i + 1, mbs, request.dtype, options);
      ++report.measured;
      profile::ProfileEntry e;
      e.key = {request.device, model.layers[i].signature, mbs, 1};
      e.layer = model.layers[i].name;
      e.fwd_s = m.fwd.median_s;
      e.bwd_s = m.bwd.median_s;
      e.bwd_weight_s = std::min(m.wgt.median_s, m.bwd.median_s);
      e.fwd_spread = m.fwd.spread;
      e.bwd_spread = m.bwd.spread;
      e.repeats = m.fwd.repeats;
      e.param_bytes = m.param_bytes;
      e.output_bytes = m.output_bytes;
      e.activation_bytes = m.activation_bytes;
      e.peak_bytes = m.peak_bytes;
      if (!options.compute.is_cpu()) {  // not counted off the CPU: the spec's, in the measured dtype
        const double element = static_cast<double>(torch::elementSize(request.dtype)) / 2;  // spec bytes are fp16
        e.activation_bytes = e.peak_bytes = model.layers[i].activation_bytes * mbs * element;
      }
      e.workspace_bytes = std::max(0.0, m.peak_bytes - m.activation_bytes);
      e.source = "measured";
      report.db.put(e);
      if (progress)
        progress(request.device + " mbs " + std::to_string(mbs) + ": " + e.layer + " (" + std::to_string(n + 1) +
                 "/" + std::to_string(todo.size()) + ")  fwd " + ms(e.fwd_s) + " ±" + percent(m.fwd.spread) +
                 "  bwd " + ms(e.bwd_s) + "  x" + std::to_string(m.fwd.repeats));
    }
  }
  profile::DeviceProfile d;
  d.device = request.device;
  d.machine = hostname();
  d.libtorch = TORCH_VERSION;
  d.dtype = dtype_name(request.dtype);
  d.date = utc_now();
  d.model = model.gpt.name + " (h" + std::to_string(model.gpt.hidden) + ", s" + std::to_string(model.gpt.seq_len) +
            ", k" + std::to_string(model.gpt.granularity) + ")";
  d.threads = request.threads;
  d.emulated_slowdown = f;
  d.optimizer_s_per_param_byte = measure_optimizer_s_per_param_byte(model, request.dtype, request.options);
  d.source = "measured";
  report.db.put_device(d);
  report.wall_s = seconds_since(start);
  return report;
}

std::vector<StageCheck> check_plan_stages(const model::ModelSpec& model, const plan::Plan& plan,
                                          torch::Dtype dtype, const MeasureOptions& options,
                                          const ProgressFn& progress) {
  std::vector<StageCheck> out;
  for (int i = 0; i < plan.num_stages(); ++i) {
    const plan::Stage& st = plan.stages[i];
    StageCheck c;
    c.stage = i;
    c.samples = st.largest_share(plan.microbatch_size);  // the replica the stage's times are
    c.predicted_fwd_s = st.fwd_s;
    c.predicted_bwd_s = st.bwd_s;
    c.slowdown = std::max(1.0, st.emulated_slowdown);
    MeasureOptions o = options;
    o.emulated_slowdown = c.slowdown;
    c.measured = measure_range(model, st.first_layer, st.last_layer, c.samples, dtype, o);
    if (progress)
      progress("stage " + std::to_string(i) + " [" + std::to_string(st.first_layer) + ", " +
               std::to_string(st.last_layer) + "): fwd " + ms(c.measured.fwd.median_s) + "  bwd " +
               ms(c.measured.bwd.median_s) + "  x" + std::to_string(c.measured.fwd.repeats));
    out.push_back(c);
  }
  return out;
}

namespace {

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
