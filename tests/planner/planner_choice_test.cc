// The search chooses recomputation and tensor parallelism when, and only when, memory or
// speed requires it, on the documented cost tables (examples/costs/, docs/planner.md),
// each case against the brute force.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include "harp/cost/cost_table.h"
#include "planner_test_util.h"

namespace harp::planner {
namespace {

using namespace testutil;  // NOLINT: test-local helpers

// The documented tables' cluster: two devices of `gib` GiB in one node.
cluster::Cluster two_devices(double gib) {
  return cluster_from_yaml(R"(
version: 1
devices:
  - {name: Dev, peak_tflops: 100, memory_gib: )" + std::to_string(gib) + R"(, memory_bandwidth_gbs: 1000}
subclusters:
  - {name: s, device: Dev, nodes: 1, devices_per_node: 2, intra_node: {bandwidth_gbps: 1000, latency_us: 0}}
)");
}

// No reserve and no workspace: the tables' bytes are all a device holds.
cost::CostConfig all_memory_usable() {
  cost::CostConfig cfg;
  cfg.memory_reserve_fraction = 0;
  cfg.workspace_bytes = 0;
  return cfg;
}

// ---------------------------------------------------------------------------------------
// Recomputation on the documented table examples/costs/recompute_demo.json (planner.md):
// an embedding and three blocks of 1, 1 and 0.5 GiB of activations per sample (0.1 GiB
// kept under full), forward 0.1, 1, 1, 3 ms, backward twice that; selective frees nothing
// there and costs time. Two devices of M GiB (no reserve, no workspace), B = 4 under
// standard 1F1B (stage 0 holds 2 microbatches, stage 1 one). The fastest cut is
// [0, 3) | [3, 4) (P = 9 ms), whose stage 0 needs 4.2 GiB without recomputation.
//   M = 10: it fits; auto recomputes nothing and equals the search without recomputation.
//   M = 3:  only [0, 2) | [2, 4) fits without (P = 12 ms); auto recomputes stage 0 fully
//           (2 x 0.3 GiB kept + 1 GiB while a block reruns; 8.3 ms <= 9 ms) and is
//           faster: speed requires it.
//   M = 1.8: nothing fits without; auto recomputes stage 0 only: memory requires it.
TEST(PaperExamples, RecomputationWhenAndOnlyWhenMemoryOrSpeedRequiresIt) {
  StatusOr<cost::CostTable> table = cost::load_cost_table(std::string(HARP_SOURCE_DIR) + "/examples/costs/recompute_demo.json");
  ASSERT_TRUE(table.ok()) << table.status().to_string();
  const cost::CostConfig cfg = all_memory_usable();
  SearchOptions none;
  none.microbatches = 4;
  none.schedule = plan::ScheduleKind::k1F1B;
  SearchOptions automatic = none;
  automatic.recompute = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  for (double gib : {10.0, 3.0, 1.8}) {
    SCOPED_TRACE("memory " + std::to_string(gib) + " GiB");
    const cluster::Cluster cluster = two_devices(gib);
    const StageCosts costs = StageCosts::from_tables(cluster, table->layers, table->times, 1, cfg);
    StatusOr<SearchResult> without = search_pipeline(costs, none);
    StatusOr<SearchResult> with = search_pipeline(costs, automatic);
    ASSERT_TRUE(without.ok() && with.ok());
    ASSERT_TRUE(with->feasible);
    // Both against the brute force over every combination of the stages' modes.
    for (const auto& [options, got] : {std::pair{&none, &*without}, std::pair{&automatic, &*with}}) {
      const BruteForceResult want = brute_force_search(costs, *options);
      ASSERT_EQ(got->feasible, want.feasible);
      if (want.feasible) {
        EXPECT_TRUE(near_rel(got->iteration_s, want.iteration_s)) << got->iteration_s << " vs " << want.iteration_s;
      }
    }
    std::vector<std::string> modes;
    std::vector<int> cuts;
    for (const plan::Stage& st : with->plan.stages) {
      modes.push_back(recompute_name(st.recompute));
      cuts.push_back(st.last_layer);
    }
    EXPECT_EQ(cuts, (std::vector<int>{3, 4}));
    if (gib == 10.0) {
      EXPECT_EQ(modes, (std::vector<std::string>{"none", "none"}));
      EXPECT_EQ(with->iteration_s, without->iteration_s);
    } else {
      EXPECT_EQ(modes, (std::vector<std::string>{"full", "none"}));
      EXPECT_NEAR(with->plan.predicted.period_s, 9e-3, 1e-12);
      EXPECT_NEAR(with->plan.stages[0].bwd_s, 0.2e-3 + 2e-3 + 2e-3 + 1e-3 + 1e-3, 1e-12);  // + the blocks' forward
      // Kept, and the stage's output until its backward.
      EXPECT_NEAR(with->plan.stages[0].activation_bytes, 0.3 * kGiB + table->layers[2].output_bytes, 1);
      EXPECT_NEAR(with->plan.stages[0].memory_static_bytes, 1.0 * kGiB, 1);  // the largest block, rerun
      if (gib == 3.0) {
        ASSERT_TRUE(without->feasible);
        EXPECT_NEAR(without->plan.predicted.period_s, 12e-3, 1e-12);
        EXPECT_LT(with->iteration_s, without->iteration_s);
      } else {
        EXPECT_FALSE(without->feasible);
      }
    }
  }
}

// Tensor parallelism on documented cost tables (examples/costs/tp_demo.json and
// tp_speed_demo.json, docs/planner.md): two devices in one node, 8 microbatches of one
// sample, 1F1B; tp 2 runs every layer in 0.7 x its time (its collectives included) and
// halves the activations.
//   tp_demo (blocks of 4 ms forward), 4 GiB: two pipeline stages (13.5 ms a microbatch
//     each) beat tp 2 (18.9 ms): tp 1.
//   tp_demo, 2 GiB: the first of two stages keeps 2 microbatches (2.2 GiB) and one device
//     alone all 2.2 GiB: only tp 2 fits (1.1 GiB): memory requires it.
//   tp_speed_demo (blocks of 8 and 1 ms), 4 GiB: no cut balances the 8 ms block (its
//     stage takes 25.5 ms a microbatch); tp 2 takes 21 ms: speed requires it.
TEST(PaperExamples, TensorParallelismWhenAndOnlyWhenMemoryOrSpeedRequiresIt) {
  const cost::CostConfig cfg = all_memory_usable();
  SearchOptions options;
  options.microbatches = 8;
  options.schedule = plan::ScheduleKind::k1F1B;
  for (const auto& [file, gib, want_tp] : {std::make_tuple("tp_demo.json", 4.0, 1), std::make_tuple("tp_demo.json", 2.0, 2),
                                           std::make_tuple("tp_speed_demo.json", 4.0, 2)}) {
    SCOPED_TRACE(std::string(file) + ", " + std::to_string(gib) + " GiB");
    StatusOr<cost::CostTable> table = cost::load_cost_table(std::string(HARP_SOURCE_DIR) + "/examples/costs/" + file);
    ASSERT_TRUE(table.ok()) << table.status().to_string();
    const cluster::Cluster cluster = two_devices(gib);
    const StageCosts costs = StageCosts::from_tables(cluster, table->layers, table->times, 1, cfg);
    StatusOr<SearchResult> got = search_pipeline(costs, options);
    ASSERT_TRUE(got.ok() && got->feasible);
    const BruteForceResult want = brute_force_search(costs, options);
    ASSERT_TRUE(want.feasible);
    EXPECT_TRUE(near_rel(got->iteration_s, want.iteration_s)) << got->iteration_s << " vs " << want.iteration_s;
    const auto& stages = got->plan.stages;
    if (want_tp == 1) {
      ASSERT_EQ(stages.size(), 2u);
      EXPECT_EQ(stages[0].tp, 1);
      EXPECT_EQ(stages[1].tp, 1);
    } else {
      ASSERT_EQ(stages.size(), 1u);
      EXPECT_EQ(stages[0].tp, 2);
      EXPECT_NEAR(stages[0].fwd_s, 0.7 * (std::string(file) == "tp_demo.json" ? 9e-3 : 10e-3), 1e-12);  // every layer
    }
    // Without tp (--max-tp 1) the same problem is slower or does not fit.
    SearchOptions no_tp = options;
    no_tp.max_tp = 1;
    StatusOr<SearchResult> without = search_pipeline(costs, no_tp);
    ASSERT_TRUE(without.ok());
    if (want_tp == 1) {
      EXPECT_EQ(without->iteration_s, got->iteration_s);
    } else if (gib == 2.0) {
      EXPECT_FALSE(without->feasible);
    } else {
      ASSERT_TRUE(without->feasible);
      EXPECT_GT(without->iteration_s, got->iteration_s);
    }
  }
}

// The search on several cores fills each layer's DP states side by side (when a layer
// has 64 or more): the plan, its time and the search's counts are those of one core,
// on a cluster wide enough to use the threads, with uneven layers and mixed devices.
TEST(ParallelSearch, EveryCoreGivesTheOneCorePlan) {
  const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: wide
subclusters:
  - {name: a, device: A100-40GB, nodes: 6, devices_per_node: 8,
     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: v, device: V100-32GB, nodes: 4, devices_per_node: 8,
     intra_node: {bandwidth_gbps: 1200, latency_us: 5}, inter_node: {bandwidth_gbps: 100, latency_us: 10}}
links:
  - {between: [a, v], bandwidth_gbps: 10, latency_ms: 1}
)");
  const int L = 24, mbs = 8;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  Times times;
  for (int samples = 1; samples <= mbs; samples *= 2)
    for (const auto& [device, speed] : {std::pair{"A100-40GB", 1.0}, std::pair{"V100-32GB", 2.2}}) {
      StageCosts::LayerTimes t;
      std::mt19937 layer_rng(7);  // the same unevenness on every device and mesh
      for (int l = 0; l < L; ++l) {
        const double per = 1e-3 * speed * samples * jitter(layer_rng);
        t.fwd_s.push_back(per / 3);
        t.bwd_s.push_back(per * 2 / 3);
      }
      times[device][samples] = t;
    }
  const StageCosts costs = StageCosts::from_tables(
      cluster, std::vector<StageCosts::LayerBytes>(L, {64 * kMiB, 8 * kMiB, 4e6, {}}), times, mbs, cost::CostConfig{});
  SearchOptions one, all;
  one.microbatches = all.microbatches = 16;
  one.threads = 1;
  all.threads = 2;  // more lanes than this machine's cores would still be exact
  StatusOr<SearchResult> a = search_pipeline(costs, one), b = search_pipeline(costs, all);
  HARP_ASSERT_OK(a.status());
  HARP_ASSERT_OK(b.status());
  ASSERT_TRUE(a->feasible);
  EXPECT_EQ(a->iteration_s, b->iteration_s);
  EXPECT_EQ(describe_plan(costs, a->placements, one), describe_plan(costs, b->placements, all));
  EXPECT_EQ(a->launch_counts, b->launch_counts);
  EXPECT_EQ(a->stats.states_visited, b->stats.states_visited);
  EXPECT_EQ(a->stats.front_entries, b->stats.front_entries);
  EXPECT_GT(a->plan.num_stages(), 1);
}

}  // namespace
}  // namespace harp::planner
