// The exact planner (harp_search.h) against the brute-force oracle
// (tests/reference/brute_force_planner.h) on hundreds of random small problems, plus the
// HARP paper's worked examples reproduced through search_pipeline and an infeasible model.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "harp/cluster/cluster_io.h"
#include "harp/common/document.h"
#include "harp/planner/harp_search.h"
#include "harp/planner/plan_builder.h"
#include "harp/planner/stage_costs.h"
#include "reference/brute_force_planner.h"

namespace harp::planner {
namespace {

using reference::BruteForceResult;
using reference::brute_force_search;
using Times = std::map<std::string, std::map<int, StageCosts::LayerTimes>>;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

cluster::Cluster cluster_from_yaml(const std::string& yaml) {
  StatusOr<Json> json = parse_yaml_text(yaml, "<inline>");
  HARP_CHECK(json.ok()) << json.status().to_string();
  StatusOr<cluster::Cluster> c = cluster::parse_cluster(*json, "<inline>");
  HARP_CHECK(c.ok()) << c.status().to_string() << "\n" << yaml;
  return *c;
}

bool near_rel(double a, double b, double rel = 1e-9) {
  return std::abs(a - b) <= rel * std::max({1.0, std::abs(a), std::abs(b)});
}

plan::ScheduleKind schedule_of(const SearchOptions& o) {
  return o.harp_schedule ? plan::ScheduleKind::kHarp1F1B : plan::ScheduleKind::k1F1B;
}

plan::Plan rebuild(const StageCosts& costs, const std::vector<Placement>& placements,
                   const SearchOptions& o) {
  BuildOptions b;
  b.microbatches = o.microbatches;
  b.schedule = schedule_of(o);
  return build_plan(costs, placements, b);
}

std::string describe_plan(const StageCosts& costs, const std::vector<Placement>& placements,
                          const SearchOptions& o) {
  if (placements.empty()) return "  (no plan)\n";
  const plan::Plan p = rebuild(costs, placements, o);
  std::ostringstream s;
  s.precision(12);
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& pl = placements[i];
    const plan::Stage& st = p.stages[i];
    s << "  stage " << i << ": layers [" << pl.first_layer << ", " << pl.last_layer << ") sub "
      << pl.subcluster << " node " << pl.first_node << " local " << pl.first_local << " devices "
      << pl.devices << " dp " << pl.dp << " tp " << pl.tp << " | t " << st.compute_s() << " c "
      << st.comm_s << " ar+opt " << st.allreduce_s + st.optimizer_s << " N " << st.launch_count
      << " mem " << st.memory_bytes / kGiB << " GiB\n";
  }
  s << "  T " << p.predicted.iteration_s << " P " << p.predicted.period_s << " memory "
    << check_memory(costs, p).to_string() << "\n";
  return s.str();
}

// ---------------------------------------------------------------------------------------
// Random small problems.

struct RandomCase {
  std::string cluster_yaml;
  std::vector<StageCosts::LayerBytes> layers;
  Times times;
  int microbatch_size = 1;
  SearchOptions options;
};

std::string describe_case(const RandomCase& rc) {
  std::ostringstream s;
  s.precision(12);
  s << "cluster:\n" << rc.cluster_yaml << "microbatch_size " << rc.microbatch_size << "\n";
  for (size_t i = 0; i < rc.layers.size(); ++i)
    s << "layer " << i << ": param " << rc.layers[i].param_bytes << " act "
      << rc.layers[i].activation_bytes << " out " << rc.layers[i].output_bytes << "\n";
  for (const auto& [dev, by_samples] : rc.times)
    for (const auto& [samples, t] : by_samples) {
      s << "times " << dev << " samples " << samples << ":";
      for (size_t i = 0; i < t.fwd_s.size(); ++i) s << " (" << t.fwd_s[i] << ", " << t.bwd_s[i] << ")";
      s << "\n";
    }
  const SearchOptions& o = rc.options;
  s << "options: B " << o.microbatches << " allow_idle " << o.allow_idle_devices << " fixed_order "
    << o.fixed_order << " harp_schedule " << o.harp_schedule << " max_tp " << o.max_tp << "\n";
  return s.str();
}

// Sizes are bounded so that the brute force stays fast: at most 3 subclusters of
// 1-2 nodes x 1-4 devices and 2-6 layers. Device memory is drawn so that memory binds in
// a good share of the cases (small user devices) and not at all in others (V100/A100).
RandomCase make_random_case(std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return uni(0, 1) < p; };

  RandomCase rc;
  const int C = pick(1, 3);
  const std::vector<std::string> kinds = {"V100-32GB", "A100-40GB", "T4", "SmallA", "SmallB"};
  std::ostringstream y;
  y.precision(6);
  y << "version: 1\nname: random-" << seed << "\ndevices:\n";
  // User devices with little memory, so that parameters and activations can bind.
  y << "  - {name: SmallA, peak_tflops: 50, memory_gib: " << uni(0.5, 1.5)
    << ", memory_bandwidth_gbs: " << uni(200, 900) << "}\n";
  y << "  - {name: SmallB, peak_tflops: 80, memory_gib: " << uni(0.6, 2.5)
    << ", memory_bandwidth_gbs: " << uni(200, 900) << "}\n";
  y << "subclusters:\n";
  std::vector<std::string> used_kinds;
  for (int c = 0; c < C; ++c) {
    const std::string kind = kinds[pick(0, static_cast<int>(kinds.size()) - 1)];
    used_kinds.push_back(kind);
    y << "  - {name: s" << c << ", device: " << kind << ", nodes: " << pick(1, 2)
      << ", devices_per_node: " << pick(1, 4) << ",\n     intra_node: {bandwidth_gbps: "
      << uni(50, 300) << ", latency_us: " << uni(2, 20) << "},\n     inter_node: {bandwidth_gbps: "
      << uni(10, 100) << ", latency_us: " << uni(5, 50) << "}}\n";
  }
  if (C > 1) {
    y << "links:\n";
    auto link = [&](int a, int b) {
      y << "  - {between: [s" << a << ", s" << b << "], bandwidth_gbps: " << uni(1, 20)
        << ", latency_ms: " << uni(0.05, 2) << "}\n";
    };
    for (int c = 0; c + 1 < C; ++c) link(c, c + 1);
    // Sometimes the ends are linked too, so that permuted orders and skipped
    // subclusters become possible.
    if (C == 3 && chance(0.5)) link(0, 2);
  }
  rc.cluster_yaml = y.str();

  const int L = pick(2, 6);
  rc.microbatch_size = std::vector<int>{1, 2, 4}[pick(0, 2)];
  for (int i = 0; i < L; ++i) {
    StageCosts::LayerBytes b;
    b.param_bytes = uni(2, 48) * kMiB;
    b.activation_bytes = uni(0.5, 24) * kMiB / rc.microbatch_size;
    b.output_bytes = uni(0.02, 4) * 1e6 / rc.microbatch_size;
    rc.layers.push_back(b);
  }
  // Per-layer work shared by every device type, scaled by a per-type speed and a
  // sublinear per-sample curve, with a little noise so no table is exactly proportional.
  std::vector<double> work(L), bwd_factor(L);
  for (int i = 0; i < L; ++i) {
    work[i] = uni(1e-3, 10e-3);
    bwd_factor[i] = uni(1.5, 2.5);
  }
  std::sort(used_kinds.begin(), used_kinds.end());
  used_kinds.erase(std::unique(used_kinds.begin(), used_kinds.end()), used_kinds.end());
  for (const std::string& kind : used_kinds) {
    const double speed = uni(0.3, 3);
    const double alpha = uni(0.6, 1.0);
    for (int samples = 1; samples <= rc.microbatch_size; samples *= 2) {
      StageCosts::LayerTimes t;
      const double scale = speed * std::pow(static_cast<double>(samples) / rc.microbatch_size, alpha);
      for (int i = 0; i < L; ++i) {
        t.fwd_s.push_back(work[i] * scale * uni(0.9, 1.1));
        t.bwd_s.push_back(t.fwd_s.back() * bwd_factor[i]);
      }
      rc.times[kind][samples] = t;
    }
  }
  // Sometimes drop one entry so that has() removes some shapes (or a whole subcluster).
  if (chance(0.15)) {
    auto& by_samples = rc.times[used_kinds[pick(0, static_cast<int>(used_kinds.size()) - 1)]];
    auto it = by_samples.begin();
    std::advance(it, pick(0, static_cast<int>(by_samples.size()) - 1));
    by_samples.erase(it);
  }

  rc.options.microbatches = pick(1, 12);
  rc.options.allow_idle_devices = chance(0.5);
  rc.options.fixed_order = C == 1 || chance(0.5);
  rc.options.harp_schedule = chance(0.7);
  rc.options.threads = 1;
  return rc;
}

// What a group of cases exercised, so that a generator change that stops covering a
// feature (memory binding, δ > 1, infeasibility) fails loudly instead of silently.
struct Coverage {
  int cases = 0, feasible = 0, infeasible = 0, memory_binds = 0, delta_above_one = 0;
  int idle_devices = 0, permuted_order = 0, data_parallel = 0;
  long long plans = 0;
};

void check_case(std::uint32_t seed, Coverage* cov) {
  const RandomCase rc = make_random_case(seed);
  const cluster::Cluster cluster = cluster_from_yaml(rc.cluster_yaml);
  const StageCosts costs =
      StageCosts::from_tables(cluster, rc.layers, rc.times, rc.microbatch_size, cost::CostConfig{});
  const SearchOptions& o = rc.options;

  StatusOr<SearchResult> got = search_pipeline(costs, o);
  ASSERT_TRUE(got.ok()) << got.status().to_string() << "\n" << describe_case(rc);
  const BruteForceResult want = brute_force_search(costs, o);

  ++cov->cases;
  cov->plans += want.plans_enumerated;
  const std::string both = "\n" + describe_case(rc) + "planner (T " + std::to_string(got->iteration_s) +
                           "):\n" + describe_plan(costs, got->placements, o) +
                           "brute force (T " + std::to_string(want.iteration_s) + "):\n" +
                           describe_plan(costs, want.placements, o);
  ASSERT_EQ(got->feasible, want.feasible) << both;
  if (!want.feasible) {
    ++cov->infeasible;
    EXPECT_FALSE(got->infeasible_reason.empty());
    return;
  }
  ++cov->feasible;
  EXPECT_TRUE(near_rel(got->iteration_s, want.iteration_s))
      << "planner " << got->iteration_s << " vs brute force " << want.iteration_s << both;

  // The planner's own plan, rebuilt independently, has the T it reports and fits.
  const plan::Plan p = rebuild(costs, got->placements, o);
  EXPECT_TRUE(near_rel(p.predicted.iteration_s, got->iteration_s))
      << "rebuilt " << p.predicted.iteration_s << both;
  EXPECT_TRUE(near_rel(p.predicted.period_s, got->period_s)) << both;
  EXPECT_TRUE(check_memory(costs, p).ok()) << check_memory(costs, p).to_string() << both;
  std::vector<int> launch;
  for (const auto& s : p.stages) launch.push_back(s.launch_count);
  EXPECT_EQ(launch, got->launch_counts) << both;

  if (want.iteration_s > want.iteration_ignoring_memory_s * (1 + 1e-12)) ++cov->memory_binds;
  for (size_t i = 0; i + 1 < launch.size(); ++i)
    if (launch[i] - launch[i + 1] > 1) {
      ++cov->delta_above_one;
      break;
    }
  int used = 0;
  bool ascending = true, dp = false;
  for (size_t i = 0; i < want.placements.size(); ++i) {
    used += want.placements[i].devices;
    dp = dp || want.placements[i].dp > 1;
    if (i > 0 && want.placements[i].subcluster < want.placements[i - 1].subcluster) ascending = false;
  }
  if (used < cluster.num_devices()) ++cov->idle_devices;
  if (!ascending) ++cov->permuted_order;
  if (dp) ++cov->data_parallel;
}

constexpr int kGroups = 6;
constexpr int kCasesPerGroup = 50;

class PlannerMatchesBruteForce : public ::testing::TestWithParam<int> {};

TEST_P(PlannerMatchesBruteForce, OnRandomSmallProblems) {
  const auto start = std::chrono::steady_clock::now();
  Coverage cov;
  for (int k = 0; k < kCasesPerGroup; ++k) {
    const std::uint32_t seed = 7919u * static_cast<std::uint32_t>(GetParam()) + static_cast<std::uint32_t>(k);
    SCOPED_TRACE("case seed " + std::to_string(seed));
    check_case(seed, &cov);
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("group %d: %d cases, %d feasible, %d infeasible, %d memory-bound, %d with delta > 1, "
              "%d with idle devices, %d permuted, %d data-parallel; %lld plans enumerated; %.2f s\n",
              GetParam(), cov.cases, cov.feasible, cov.infeasible, cov.memory_binds,
              cov.delta_above_one, cov.idle_devices, cov.permuted_order, cov.data_parallel,
              cov.plans, wall_s);
  EXPECT_EQ(cov.cases, kCasesPerGroup);
}

INSTANTIATE_TEST_SUITE_P(Groups, PlannerMatchesBruteForce, ::testing::Range(0, kGroups));

}  // namespace
}  // namespace harp::planner
