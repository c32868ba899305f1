// The exact planner (harp_search.h) against the brute-force oracle
// (tests/reference/brute_force_planner.h) on hundreds of random small problems.
#include <gtest/gtest.h>

#include "planner_test_util.h"

namespace harp::planner {
namespace {

using namespace testutil;  // NOLINT: test-local helpers

// ---------------------------------------------------------------------------------------
// Random small problems.

struct RandomCase {
  std::string cluster_yaml;
  std::vector<StageCosts::LayerBytes> layers;
  Times times;
  int microbatch_size = 1;
  SearchOptions options;
  cost::CostConfig config;
};

// Everything needed to rebuild a case by hand (or rerun it from its seed).
std::string describe_case(const RandomCase& rc) {
  std::ostringstream s;
  s.precision(17);
  s << "cluster:\n" << rc.cluster_yaml << "microbatch_size " << rc.microbatch_size << "\n";
  for (size_t i = 0; i < rc.layers.size(); ++i)
    s << "layer " << i << ": param " << rc.layers[i].param_bytes << " act "
      << rc.layers[i].activation_bytes << " out " << rc.layers[i].output_bytes << " block "
      << rc.layers[i].block << " in " << rc.layers[i].input_bytes << " scores "
      << rc.layers[i].attention_score_bytes << " attention " << rc.layers[i].attention_flop_fraction << "\n";
  for (const auto& [dev, by_samples] : rc.times)
    for (const auto& [samples, t] : by_samples) {
      s << "times " << dev << " samples " << samples << ":";
      for (size_t i = 0; i < t.fwd_s.size(); ++i) s << " (" << t.fwd_s[i] << ", " << t.bwd_s[i] << ")";
      s << "\n";
    }
  const SearchOptions& o = rc.options;
  s << "options: B " << o.microbatches << " allow_idle " << o.allow_idle_devices << " fixed_order "
    << o.fixed_order << " schedule " << plan::schedule_kind_name(o.schedule) << " max_tp " << o.max_tp
    << " recompute";
  for (Recompute r : o.recompute) s << " " << recompute_name(r);
  s << " zero";
  for (int z : o.zero) s << " " << z;
  s << " (optimizer " << rc.config.optimizer_bytes_per_param_byte << ", gradient "
    << rc.config.gradient_bytes_per_param_byte << ", parameter " << rc.config.parameter_bytes_per_param_byte
    << " bytes per param byte)\n";
  return s.str();
}

// Sizes are bounded so that the brute force stays fast: at most 3 subclusters of 1-2
// nodes x 1-4 devices (or 3 nodes x 1-2) and 2-7 layers. Each case draws a regime, so
// that every group sees roomy problems, problems where memory binds, slow cross links
// (δ = 2 or 3, whose extra launch counts then meet the memory limit), and both at once.
// The memory of the user devices SmallA/SmallB is sized from the model itself (a
// fraction of its state plus a few microbatches of activations), so that it binds for
// some placements and not others.
//
// Recomputation groups (`recompute`) draw tight memory, give the layers blocks, kept
// inputs, attention scores and attention shares, and let the search choose the stages'
// modes (auto), or force one mode on every stage.
RandomCase make_random_case(std::uint32_t seed, bool interplay_only, bool recompute, bool zero = false) {
  std::mt19937 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return uni(0, 1) < p; };

  RandomCase rc;
  // Regimes: roomy, tight memory, slow links, both (the interplay of δ and memory).
  const int regime = interplay_only ? 3
                     : recompute    ? std::discrete_distribution<int>({0, 1, 0, 1})(rng)
                                    : std::discrete_distribution<int>({2, 2, 2, 4})(rng);
  const bool tight_memory = regime == 1 || regime == 3;
  const bool slow_links = regime == 2 || regime == 3;

  const int C = 1 + std::discrete_distribution<int>({interplay_only ? 0.0 : 1.0, 3.0, recompute ? 0.0 : 3.0})(rng);
  // Three subclusters in every order with idle devices make the most plans: one layer
  // fewer keeps the brute force's worst case near a hundred thousand plans. Every stage's
  // recomputation mode multiplies them again: at most 2 subclusters and 5 layers then.
  const int L = pick(2, recompute ? 5 : C == 3 ? 6 : 7);
  // dp must divide the microbatch: with 1 sample every mesh is one device, and with
  // every device used most clusters cannot be covered, so 1 is drawn less often.
  rc.microbatch_size = std::vector<int>{1, 2, 2, 4, 4}[pick(0, 4)];
  double model_state = 0, model_act = 0;
  for (int i = 0; i < L; ++i) {
    StageCosts::LayerBytes b;
    b.param_bytes = uni(2, 48) * kMiB;
    b.activation_bytes = uni(1, 48) * kMiB / rc.microbatch_size;
    b.output_bytes = uni(0.02, 4) * 1e6 / rc.microbatch_size;
    rc.layers.push_back(b);
    model_state += cost::CostConfig{}.state_bytes_per_param_byte * b.param_bytes;
    model_act += b.activation_bytes * rc.microbatch_size;
  }
  // Per-layer work shared by every device type, scaled by a per-type speed and a
  // sublinear per-sample curve, with a little noise so no table is exactly proportional.
  std::vector<double> work(L), bwd_factor(L);
  double model_s = 0, cut_bytes = 0;  // whole model, one microbatch, speed 1; mean cut
  for (int i = 0; i < L; ++i) {
    work[i] = uni(1e-3, 10e-3);
    bwd_factor[i] = uni(1.5, 2.5);
    model_s += work[i] * (1 + bwd_factor[i]);
    cut_bytes += rc.layers[i].output_bytes * rc.microbatch_size / L;
  }
  auto small_memory_gib = [&]() {
    const double f = tight_memory ? uni(0.2, 0.9) : uni(0.8, 3);
    const double need = cost::CostConfig{}.workspace_bytes + f * (model_state + 3 * model_act);
    return need / (1 - cost::CostConfig{}.memory_reserve_fraction) / kGiB;
  };

  // A slow link makes a mean cut cost 2.5-30% of the whole model's time on one device:
  // for two to four stages that is the band of δ = 2 and 3, c >= P/10.
  auto slow_gbps = [&]() { return cut_bytes / (uni(0.025, 0.3) * model_s) * 8 / 1e9; };

  const std::vector<std::string> kinds =
      tight_memory ? std::vector<std::string>{"SmallA", "SmallB"}
                   : std::vector<std::string>{"V100-32GB", "A100-40GB", "T4", "SmallA", "SmallB"};
  std::ostringstream y;
  y.precision(9);
  y << "version: 1\nname: random-" << seed << "\ndevices:\n";
  y << "  - {name: SmallA, peak_tflops: 50, memory_gib: " << small_memory_gib()
    << ", memory_bandwidth_gbs: " << uni(200, 900) << "}\n";
  y << "  - {name: SmallB, peak_tflops: 80, memory_gib: " << small_memory_gib()
    << ", memory_bandwidth_gbs: " << uni(200, 900) << "}\n";
  y << "subclusters:\n";
  std::vector<std::string> used_kinds;
  for (int c = 0; c < C; ++c) {
    const std::string kind = kinds[pick(0, static_cast<int>(kinds.size()) - 1)];
    used_kinds.push_back(kind);
    // Up to 3 nodes when nodes are small: whole-node meshes of 3 nodes, and of 2 or 3
    // single-device nodes.
    const int dpn = pick(1, 4);
    const int nodes = pick(1, dpn <= 2 ? 3 : 2);
    // The δ rule applies to every link that leaves a node, so with slow links the
    // network between nodes of a subcluster is sometimes slow too.
    const double inter_gbps = slow_links && chance(0.5) ? slow_gbps() : uni(10, 100);
    y << "  - {name: s" << c << ", device: " << kind << ", nodes: " << nodes
      << ", devices_per_node: " << dpn << ",\n     intra_node: {bandwidth_gbps: "
      << uni(50, 300) << ", latency_us: " << uni(2, 20) << "},\n     inter_node: {bandwidth_gbps: "
      << inter_gbps << ", latency_us: " << uni(5, 50) << "}}\n";
  }
  if (C > 1) {
    y << "links:\n";
    auto link = [&](int a, int b) {
      y << "  - {between: [s" << a << ", s" << b << "], bandwidth_gbps: "
        << (slow_links ? slow_gbps() : uni(1, 20)) << ", latency_ms: "
        << (slow_links ? uni(0.01, 0.3) : uni(0.05, 2)) << "}\n";
    };
    for (int c = 0; c + 1 < C; ++c) link(c, c + 1);
    // Sometimes the ends are linked too, so that permuted orders and skipped
    // subclusters become possible.
    if (C == 3 && chance(0.5)) link(0, 2);
  }
  rc.cluster_yaml = y.str();

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

  // B < 3 clamps every launch count to at most 2, hiding δ; keep it to one case in ten.
  rc.options.microbatches = chance(0.1) ? pick(1, 2) : pick(3, 12);
  rc.options.allow_idle_devices = chance(0.6);
  rc.options.fixed_order = C == 1 || chance(0.5);
  rc.options.schedule = chance(0.8) ? plan::ScheduleKind::kHarp1F1B : plan::ScheduleKind::k1F1B;
  if (recompute) {
    // Blocks of 1-3 consecutive layers; the first and last layer are sometimes outside
    // any block (the embedding and the LM head).
    int block = 0;
    for (int i = 0; i < L;) {
      const int run = pick(1, 3);
      const bool outside = (i == 0 || i + run >= L) && chance(0.4);
      for (int j = i; j < std::min(L, i + run); ++j) {
        StageCosts::LayerBytes& b = rc.layers[j];
        b.block = outside ? -1 : block;
        b.input_bytes = uni(0.02, 0.4) * b.activation_bytes;
        if (chance(0.6)) {
          b.attention_score_bytes = uni(0.2, 0.8) * b.activation_bytes;
          b.attention_flop_fraction = uni(0.05, 0.5);
        }
      }
      block += outside ? 0 : 1;
      i += run;
    }
    const int policy = pick(0, 5);
    rc.options.recompute = policy == 0   ? std::vector<Recompute>{Recompute::kFull}
                           : policy == 1 ? std::vector<Recompute>{Recompute::kSelective}
                                         : std::vector<Recompute>{Recompute::kNone, Recompute::kSelective,
                                                                  Recompute::kFull};
  }
  if (zero) {
    // Sharded optimizer state: forced or chosen per stage, with an all-gather of up to 4x
    // the gradients' bytes, so that sharding may cost time where it saves memory.
    const int policy = pick(0, 2);
    rc.options.zero = policy == 0 ? std::vector<int>{1} : policy == 1 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2};
    rc.config.gradient_bytes_per_param_byte = pick(1, 2);
    rc.config.parameter_bytes_per_param_byte = pick(1, 4);
    rc.config.optimizer_bytes_per_param_byte = uni(2, 8);
  }
  return rc;
}

// What a group of cases exercised, so that a generator change that stops covering a
// feature (memory binding, δ > 1, infeasibility) fails loudly instead of silently.
struct Coverage {
  int cases = 0, feasible = 0, infeasible = 0, memory_binds = 0, delta_above_one = 0;
  int memory_binds_with_delta = 0;
  int idle_devices = 0, permuted_order = 0, data_parallel = 0;
  int recomputing = 0, mixed_modes = 0;  // plans with a recomputing stage; with two modes
  int sharded = 0, mixed_zero = 0;       // plans with a ZeRO stage; with sharded and unsharded replicated stages
  long long plans = 0;
};

void check_case(std::uint32_t seed, bool interplay_only, bool recompute, bool zero, Coverage* cov) {
  const RandomCase rc = make_random_case(seed, interplay_only, recompute, zero);
  const cluster::Cluster cluster = cluster_from_yaml(rc.cluster_yaml);
  const StageCosts costs =
      StageCosts::from_tables(cluster, rc.layers, rc.times, rc.microbatch_size, rc.config);
  const SearchOptions& o = rc.options;

  StatusOr<SearchResult> got = search_pipeline(costs, o);
  ASSERT_TRUE(got.ok()) << got.status().to_string() << "\n" << describe_case(rc);
  const BruteForceResult want = brute_force_search(costs, o, &got->placements);

  ++cov->cases;
  cov->plans += want.plans_enumerated;
  char totals[128];
  std::snprintf(totals, sizeof totals, "planner T %.17g, brute force T %.17g\n", got->iteration_s,
                want.iteration_s);
  const std::string both = "\n" + describe_case(rc) + totals + "planner's plan:\n" +
                           describe_plan(costs, got->placements, o) + "brute force's plan:\n" +
                           describe_plan(costs, want.placements, o);
  ASSERT_EQ(got->feasible, want.feasible) << both;
  if (zero && o.zero.size() > 1) {
    // Choosing per stage is never slower than not sharding (its space holds that one).
    SearchOptions none = o;
    none.zero = {0};
    StatusOr<SearchResult> without = search_pipeline(costs, none);
    ASSERT_TRUE(without.ok());
    if (without->feasible) {
      ASSERT_TRUE(got->feasible) << both;
      EXPECT_LE(got->iteration_s, without->iteration_s * (1 + 1e-12)) << both;
    }
  }
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
  // And it is a plan of the search space, not merely one with the right T.
  EXPECT_TRUE(want.probe_enumerated) << "planner's plan is outside the search space" << both;
  EXPECT_TRUE(want.probe_fits) << both;
  std::vector<int> launch;
  for (const auto& s : p.stages) launch.push_back(s.launch_count);
  EXPECT_EQ(launch, got->launch_counts) << both;

  auto has_delta_above_one = [](const std::vector<int>& n) {
    for (size_t i = 0; i + 1 < n.size(); ++i)
      if (n[i] - n[i + 1] > 1) return true;
    return false;
  };
  const bool memory_binds = want.iteration_s > want.iteration_ignoring_memory_s * (1 + 1e-12);
  const bool delta_above_one = has_delta_above_one(launch);
  cov->memory_binds += memory_binds;
  cov->delta_above_one += delta_above_one;
  // Memory decided the answer and δ > 1 was involved: in the plan chosen, or in the
  // faster plan whose extra in-flight microbatches did not fit.
  cov->memory_binds_with_delta +=
      memory_binds && (delta_above_one || has_delta_above_one(want.launch_counts_ignoring_memory));
  int used = 0;
  bool ascending = true, dp = false;
  for (size_t i = 0; i < want.placements.size(); ++i) {
    used += want.placements[i].devices;
    dp = dp || want.placements[i].dp > 1;
    if (i > 0 && want.placements[i].subcluster < want.placements[i - 1].subcluster) ascending = false;
  }
  if (used < cluster.num_devices()) ++cov->idle_devices;
  bool recomputing = false, mixed = false;
  for (const Placement& pl : got->placements) {
    recomputing = recomputing || pl.recompute != Recompute::kNone;
    mixed = mixed || pl.recompute != got->placements.front().recompute;
  }
  cov->recomputing += recomputing;
  cov->mixed_modes += mixed;
  bool sharded = false, unsharded = false;
  for (const Placement& pl : got->placements) {
    sharded = sharded || pl.zero > 0;
    unsharded = unsharded || (pl.dp > 1 && pl.zero == 0);
  }
  cov->sharded += sharded;
  cov->mixed_zero += sharded && unsharded;
  if (!ascending) ++cov->permuted_order;
  if (dp) ++cov->data_parallel;
}

// Groups 0-5 mix every regime; groups 6-7 draw only slow links with tight memory on 2-3
// subclusters, where δ's extra launch counts meet the memory limit most often; groups
// 8-9 add recomputation, 10-11 sharded optimizer state (make_random_case).
constexpr int kGroups = 12;
constexpr int kZeroGroups = 10;
constexpr int kMixedGroups = 6;
constexpr int kRecomputeGroups = 8;
constexpr int kCasesPerGroup = 100;

class PlannerMatchesBruteForce : public ::testing::TestWithParam<int> {};

TEST_P(PlannerMatchesBruteForce, OnRandomSmallProblems) {
  const auto start = std::chrono::steady_clock::now();
  const bool zero = GetParam() >= kZeroGroups;
  const bool recompute = GetParam() >= kRecomputeGroups && !zero;
  const bool interplay_only = GetParam() >= kMixedGroups && !recompute;
  // HARP_PLANNER_SOAK=n runs n times as many cases (new seeds after the usual ones),
  // to hunt for disagreements beyond the suite's fixed sample.
  const char* soak_env = std::getenv("HARP_PLANNER_SOAK");
  const int soak = soak_env != nullptr ? std::max(1, std::atoi(soak_env)) : 1;
  const int cases = kCasesPerGroup * soak;
  Coverage cov;
  int failing_cases = 0;
  const ::testing::TestResult* result = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  for (int k = 0; k < cases; ++k) {
    const std::uint32_t seed =
        1000003u * static_cast<std::uint32_t>(GetParam()) + static_cast<std::uint32_t>(k);
    SCOPED_TRACE("case seed " + std::to_string(seed) + (interplay_only ? " (interplay)" : ""));
    const int parts_before = result->total_part_count();
    check_case(seed, interplay_only, recompute, zero, &cov);
    // A few failing cases say enough; hundreds would bury them.
    if (result->total_part_count() > parts_before && ++failing_cases == 3) {
      ADD_FAILURE() << "stopping this group after 3 failing cases";
      return;
    }
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("group %d: %d cases, %d feasible, %d infeasible, %d memory-bound, %d with delta > 1, "
              "%d both, %d with idle devices, %d permuted, %d data-parallel, %d recomputing, %d with "
              "two modes; %lld plans enumerated; %.2f s\n",
              GetParam(), cov.cases, cov.feasible, cov.infeasible, cov.memory_binds,
              cov.delta_above_one, cov.memory_binds_with_delta, cov.idle_devices,
              cov.permuted_order, cov.data_parallel, cov.recomputing, cov.mixed_modes, cov.plans, wall_s);
  // Every group exercises each feature. The floors sit well below the counts measured
  // with libstdc++ (a quarter or less), so another standard library's random streams
  // pass too; a zero means the generator stopped producing that kind of case.
  EXPECT_EQ(cov.cases, cases);
  EXPECT_GE(cov.feasible, 30 * soak);
  EXPECT_GE(cov.infeasible, 5 * soak);
  EXPECT_GE(cov.memory_binds, 2 * soak);
  EXPECT_GE(cov.delta_above_one, 4 * soak);
  EXPECT_GE(cov.idle_devices, 10 * soak);
  EXPECT_GE(cov.permuted_order, 1 * soak);
  EXPECT_GE(cov.data_parallel, 15 * soak);
  if (interplay_only) {
    EXPECT_GE(cov.memory_binds_with_delta, 1 * soak);
  }
  if (zero) {
    std::printf("group %d: %d sharded, %d with sharded and unsharded stages\n", GetParam(), cov.sharded, cov.mixed_zero);
    EXPECT_GE(cov.sharded, 8 * soak);
  }
  if (recompute) {
    EXPECT_GE(cov.recomputing, 8 * soak);
    EXPECT_GE(cov.mixed_modes, 1);  // measured 2 and 3 per 100 cases
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, PlannerMatchesBruteForce, ::testing::Range(0, kGroups));



}  // namespace
}  // namespace harp::planner
