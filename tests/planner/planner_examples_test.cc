// The brute-force oracle on spaces small enough to count by hand, the HARP paper's worked
// examples reproduced through search_pipeline, the δ thresholds and infeasible models.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include "harp/cost/cost_table.h"
#include "planner_test_util.h"

namespace harp::planner {
namespace {

using namespace testutil;  // NOLINT: test-local helpers

// ---------------------------------------------------------------------------------------
// The oracle itself, on spaces small enough to count by hand.

TEST(BruteForceReference, MeshesFollowTheNodeRules) {
  const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: meshes
subclusters:
  - {name: p2, device: T4, nodes: 2, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 100, latency_us: 5}, inter_node: {bandwidth_gbps: 50, latency_us: 5}}
  - {name: p3, device: T4, nodes: 2, devices_per_node: 3,
     intra_node: {bandwidth_gbps: 100, latency_us: 5}, inter_node: {bandwidth_gbps: 50, latency_us: 5}}
links:
  - {between: [p2, p3], bandwidth_gbps: 5, latency_ms: 1}
)");
  // A microbatch of 12 lets every mesh size here divide it; times exist for all of them.
  const int L = 2, mbs = 12;
  Times times;
  for (int samples : {1, 2, 3, 4, 6, 12}) times["T4"][samples] = uniform_times(L, 0.01 * samples);
  const StageCosts costs = StageCosts::from_tables(
      cluster, std::vector<StageCosts::LayerBytes>(L, {kMiB, kMiB, 1e6, {}}), times, mbs, cost::CostConfig{});
  auto sizes = [&](int sub, int offset, int free) {
    std::vector<int> z;
    for (const auto& m : reference::meshes_at(costs, SearchOptions{}, sub, offset, free)) z.push_back(m.devices);
    return z;
  };
  // dpn = 2: groups of 1 and 2 inside a node; 2 whole nodes; one whole node is the group 2.
  EXPECT_EQ(sizes(0, 0, 4), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(sizes(0, 1, 3), (std::vector<int>{1}));  // a pair from device 1 would straddle
  EXPECT_EQ(sizes(0, 2, 2), (std::vector<int>{1, 2}));
  // dpn = 3 (not a power of two): groups 1 and 2, and whole nodes of 3 and 6 devices.
  EXPECT_EQ(sizes(1, 0, 6), (std::vector<int>{1, 2, 3, 6}));
  EXPECT_EQ(sizes(1, 2, 4), (std::vector<int>{1}));  // 2..3 straddles; not a node boundary
  EXPECT_EQ(sizes(1, 3, 3), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(sizes(1, 1, 5), (std::vector<int>{1, 2}));
  // Without times for 3 samples, the 4-device mesh (dp = 4) disappears.
  times["T4"].erase(3);
  const StageCosts fewer = StageCosts::from_tables(
      cluster, std::vector<StageCosts::LayerBytes>(L, {kMiB, kMiB, 1e6, {}}), times, mbs, cost::CostConfig{});
  EXPECT_EQ(reference::meshes_at(fewer, SearchOptions{}, 0, 0, 4).size(), 2u);
}

TEST(BruteForceReference, CountsPlansByHand) {
  // One node of two devices, three layers, microbatch 2.
  {
    const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: pair
subclusters:
  - {name: s, device: T4, nodes: 1, devices_per_node: 2, intra_node: {bandwidth_gbps: 100, latency_us: 5}}
)");
    Times times;
    times["T4"][1] = uniform_times(3, 0.01);
    times["T4"][2] = uniform_times(3, 0.02);
    const StageCosts costs = StageCosts::from_tables(
        cluster, std::vector<StageCosts::LayerBytes>(3, {kMiB, kMiB, 1e6, {}}), times, 2, cost::CostConfig{});
    SearchOptions o;
    // Every device used: the pair as one dp = 2 stage, or two single stages with the
    // layers split 1 + 2 or 2 + 1.
    EXPECT_EQ(brute_force_search(costs, o).plans_enumerated, 3);
    // Idle devices allowed: also device 1 alone with all three layers.
    o.allow_idle_devices = true;
    EXPECT_EQ(brute_force_search(costs, o).plans_enumerated, 4);
  }
  // Two linked single-device subclusters, two layers.
  {
    const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: two
subclusters:
  - {name: a, device: T4, nodes: 1, devices_per_node: 1}
  - {name: b, device: T4, nodes: 1, devices_per_node: 1}
links:
  - {between: [a, b], bandwidth_gbps: 5, latency_ms: 1}
)");
    Times times;
    times["T4"][1] = uniform_times(2, 0.01);
    const StageCosts costs = StageCosts::from_tables(
        cluster, std::vector<StageCosts::LayerBytes>(2, {kMiB, kMiB, 1e6, {}}), times, 1, cost::CostConfig{});
    SearchOptions o;
    EXPECT_EQ(brute_force_search(costs, o).plans_enumerated, 1);  // a: [0,1), b: [1,2)
    o.fixed_order = false;
    EXPECT_EQ(brute_force_search(costs, o).plans_enumerated, 2);  // and b before a
    o.fixed_order = true;
    o.allow_idle_devices = true;
    EXPECT_EQ(brute_force_search(costs, o).plans_enumerated, 3);  // and a alone, b alone
    // Both orders: 2 two-stage plans, and each single-subcluster plan once per order.
    o.fixed_order = false;
    EXPECT_EQ(brute_force_search(costs, o).plans_enumerated, 6);
  }
}

// ---------------------------------------------------------------------------------------
// The paper's worked examples (harp-paper-notes.md §5), found by the planner itself.

// GPT-760M (k = 2: L = 50) on 2 x V100 (one node) + 1 x A100 over a 5 Gbit/s, 1 ms link,
// B = 64. Per-layer times are chosen so that the paper's stage costs come out: layers
// [0, 22) on the V100 pair (dp = 2) take 0.2143 s and [22, 50) on the A100 0.2202 s. One
// V100 alone is 2.2x slower per layer on the whole microbatch than each of the pair on
// half of it, so splitting the V100s into two stages does not pay.
TEST(PaperExamples, Gpt760mOnTwoV100AndOneA100) {
  const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: paper-760m
subclusters:
  - {name: v100, device: V100-32GB, nodes: 1, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: a100, device: A100-40GB, nodes: 1, devices_per_node: 1}
links:
  - {between: [v100, a100], bandwidth_gbps: 5, latency_ms: 1}
)");
  const int L = 50, mbs = 16;
  // Output of every layer: 16 sequences x 1024 tokens x hidden 1536 x 2 bytes (fp16)
  // = 50.3 MB per microbatch at any cut; ~30 MB of fp16 parameters per layer.
  std::vector<StageCosts::LayerBytes> layers(L, {30 * kMiB, 24 * kMiB, 1024.0 * 1536 * 2, {}});
  const double v100_pair = 0.2143 / 22, a100 = 0.2202 / 28;
  Times times;
  times["V100-32GB"][8] = uniform_times(L, v100_pair);
  times["V100-32GB"][16] = uniform_times(L, 2.2 * v100_pair);
  times["A100-40GB"][16] = uniform_times(L, a100);
  const StageCosts costs = StageCosts::from_tables(cluster, layers, times, mbs, cost::CostConfig{});

  SearchOptions o;
  o.microbatches = 64;
  StatusOr<SearchResult> r = search_pipeline(costs, o);
  HARP_ASSERT_OK(r);
  ASSERT_TRUE(r->feasible) << r->infeasible_reason;
  ASSERT_EQ(r->placements.size(), 2u) << describe_plan(costs, r->placements, o);
  const Placement& s0 = r->placements[0];
  const Placement& s1 = r->placements[1];
  EXPECT_EQ(s0.subcluster, 0);
  EXPECT_EQ(s0.devices, 2);
  EXPECT_EQ(s0.dp, 2);
  EXPECT_EQ(s0.first_layer, 0);
  EXPECT_EQ(s0.last_layer, 22);
  EXPECT_EQ(s1.subcluster, 1);
  EXPECT_EQ(s1.first_layer, 22);
  EXPECT_EQ(s1.last_layer, 50);
  // δ = 2 because P/10 <= c < P/2: one more in-flight microbatch than standard 1F1B.
  EXPECT_EQ(r->launch_counts, (std::vector<int>{3, 1}));

  const plan::Plan p = rebuild(costs, r->placements, o);
  EXPECT_NEAR(p.stages[0].compute_s(), 0.2143, 1e-12);
  EXPECT_NEAR(p.stages[1].compute_s(), 0.2202, 1e-12);
  EXPECT_NEAR(r->period_s, 0.2202, 1e-12);
  // c = 50331648 B / 0.625 GB/s + 1 ms (the paper's 0.0760 uses GiB; same δ band).
  EXPECT_NEAR(p.stages[0].comm_s, 16.0 * 1024 * 1536 * 2 / 0.625e9 + 1e-3, 1e-12);
  EXPECT_GE(p.stages[0].comm_s, r->period_s / 10);
  EXPECT_LT(p.stages[0].comm_s, r->period_s / 2);
  EXPECT_TRUE(near_rel(p.predicted.iteration_s, r->iteration_s));

  // Standard 1F1B: the same plan (memory does not bind) with launch counts [2, 1].
  o.schedule = plan::ScheduleKind::k1F1B;
  StatusOr<SearchResult> standard = search_pipeline(costs, o);
  ASSERT_TRUE(standard.ok() && standard->feasible);
  EXPECT_EQ(standard->launch_counts, (std::vector<int>{2, 1}));
  EXPECT_TRUE(near_rel(standard->iteration_s, r->iteration_s));
}

// GPT-6.7B-like (k = 3: L = 98) on V100 x 8 | A100 x 2 | A100 x 2 (one node each), the
// chain of examples/clusters/three_subclusters.yaml, B = 256. The paper's plan has 9
// stages, 7 on the V100 node and one per A100 node, N = [11, 10, 9, 8, 7, 6, 5, 3, 1].
// How the costs force that structure:
//  - the A100s have times only for 1 sample (dp = 2): one stage per A100 node;
//  - V100: 15 ms per layer alone (2 samples), 9 ms per layer each in a pair (1 sample);
//    A100 pair: 14 ms per layer. At P = 150 ms, 8 single V100 stages (10 layers each)
//    plus 10 layers per A100 node cover the 98 layers; with a V100 pair (16 layers) in
//    place of two singles only 96 fit, so that plan needs P = 154 ms (11 layers on an
//    A100 node), and every ms of P costs B - 1 = 255 ms. Time alone picks 8 V100 stages.
//  - but layer 0 keeps 1.2 GiB of activations per sample: a single-device head stage
//    holding 12 microbatches (8 V100 stages under the δ rule: N_0 = 12) needs 28.8 GiB
//    plus its state, over the 28.8 GiB usable, while 11 (7 V100 stages) fit. So HARP's
//    schedule makes the 8-stage plan infeasible and the optimum is the paper's 7 + 1 + 1.
//  - both cross links carry 2 x 8 MiB per microbatch at 5 Gbit/s: c ~ 28 ms, inside
//    [P/10, P/2): δ = 2 on both, δ = 1 inside the V100 node.
TEST(PaperExamples, NineStageChainV100x8A100x2A100x2) {
  const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: v100x8-a100x2-a100x2
subclusters:
  - {name: v100, device: V100-32GB, nodes: 1, devices_per_node: 8,
     intra_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: a100a, device: A100-40GB, nodes: 1, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: a100b, device: A100-40GB, nodes: 1, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 200, latency_us: 10}}
links:
  - {between: [v100, a100a], bandwidth_gbps: 5, latency_ms: 1}
  - {between: [a100a, a100b], bandwidth_gbps: 5, latency_ms: 0.2}
)");
  const int L = 98, mbs = 2;
  std::vector<StageCosts::LayerBytes> layers(L, {16 * kMiB, 2 * kMiB, 8 * kMiB, {}});
  layers[0].activation_bytes = 1.2 * kGiB;
  Times times;
  times["V100-32GB"][2] = uniform_times(L, 15e-3);
  times["V100-32GB"][1] = uniform_times(L, 9e-3);
  times["A100-40GB"][1] = uniform_times(L, 14e-3);
  const StageCosts costs = StageCosts::from_tables(cluster, layers, times, mbs, cost::CostConfig{});

  SearchOptions o;
  o.microbatches = 256;
  StatusOr<SearchResult> r = search_pipeline(costs, o);
  HARP_ASSERT_OK(r);
  ASSERT_TRUE(r->feasible) << r->infeasible_reason;
  const std::string plan_text = describe_plan(costs, r->placements, o);
  ASSERT_EQ(r->placements.size(), 9u) << plan_text;
  int v100_devices = 0, pairs = 0;
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(r->placements[i].subcluster, 0) << plan_text;
    v100_devices += r->placements[i].devices;
    pairs += r->placements[i].devices == 2 ? 1 : 0;
  }
  EXPECT_EQ(v100_devices, 8) << plan_text;
  EXPECT_EQ(pairs, 1) << plan_text;
  EXPECT_EQ(r->placements[7].subcluster, 1) << plan_text;
  EXPECT_EQ(r->placements[7].dp, 2) << plan_text;
  EXPECT_EQ(r->placements[8].subcluster, 2) << plan_text;
  EXPECT_EQ(r->placements[8].dp, 2) << plan_text;
  EXPECT_EQ(r->launch_counts, (std::vector<int>{11, 10, 9, 8, 7, 6, 5, 3, 1})) << plan_text;
  EXPECT_NEAR(r->period_s, 0.154, 1e-9) << plan_text;

  const plan::Plan p = rebuild(costs, r->placements, o);
  for (int i : {6, 7}) {
    EXPECT_TRUE(p.stages[i].crosses_nodes);
    EXPECT_GE(p.stages[i].comm_s, r->period_s / 10);
    EXPECT_LT(p.stages[i].comm_s, r->period_s / 2);
  }
  EXPECT_TRUE(check_memory(costs, p).ok());
  EXPECT_TRUE(near_rel(p.predicted.iteration_s, r->iteration_s));

  // Under standard 1F1B (δ = 1) the head of 8 single V100 stages holds only 10
  // microbatches, so the faster 10-stage plan fits: the schedule decided the structure.
  o.schedule = plan::ScheduleKind::k1F1B;
  StatusOr<SearchResult> standard = search_pipeline(costs, o);
  ASSERT_TRUE(standard.ok() && standard->feasible);
  const std::string standard_text = describe_plan(costs, standard->placements, o);
  ASSERT_EQ(standard->placements.size(), 10u) << standard_text;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(standard->placements[i].devices, 1) << standard_text;
  EXPECT_EQ(standard->launch_counts, (std::vector<int>{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
  EXPECT_NEAR(standard->period_s, 0.150, 1e-9) << standard_text;
  EXPECT_LT(standard->iteration_s, r->iteration_s);
}

// ---------------------------------------------------------------------------------------
// The δ rule's thresholds, hit exactly. Every number is a dyadic fraction (c = 1/16 s,
// stage times 5/8 or 1/8 s), so no rounding can move a cut across a threshold, and the
// planner and the brute force must both read "c < P/10" and "c < P/2" as strict.
// Memory fits N = 3 on the head stage but not N = 4, so the threshold decides feasibility.

struct ThresholdCase {
  const char* name;
  double fwd_s, bwd_s;  // per layer; t = P of the two-stage plan
  std::vector<int> launch_counts;  // expected; empty: infeasible
};

// Names the case in test listings (gtest would otherwise dump its bytes).
void PrintTo(const ThresholdCase& tc, std::ostream* os) { *os << tc.name; }

class DeltaThresholds : public ::testing::TestWithParam<ThresholdCase> {};

TEST_P(DeltaThresholds, AreStrictOnBothSides) {
  const ThresholdCase& tc = GetParam();
  // 8 Gbit/s = 1e9 B/s with no latency: 62.5 MB cross in exactly 1/16 s.
  const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: thresholds
devices:
  - {name: Tiny, peak_tflops: 10, memory_gib: 0.89, memory_bandwidth_gbs: 256}
subclusters:
  - {name: a, device: Tiny, nodes: 1, devices_per_node: 1}
  - {name: b, device: Tiny, nodes: 1, devices_per_node: 1}
links:
  - {between: [a, b], bandwidth_gbps: 8, latency_ms: 0}
)");
  // Usable 0.9 x 0.89 GiB = 820.2 MiB; state 8 MiB + workspace 256 MiB + N x (100 MiB kept
  // + the 62.5 MB output held until its backward) = 743 MiB at N = 3, 902 MiB at N = 4.
  std::vector<StageCosts::LayerBytes> layers(2, {1 * kMiB, 100 * kMiB, 62.5e6, {}});
  Times times;
  times["Tiny"][1].fwd_s = {tc.fwd_s, tc.fwd_s};
  times["Tiny"][1].bwd_s = {tc.bwd_s, tc.bwd_s};
  const StageCosts costs = StageCosts::from_tables(cluster, layers, times, 1, cost::CostConfig{});
  SearchOptions o;
  o.microbatches = 8;
  StatusOr<SearchResult> r = search_pipeline(costs, o);
  HARP_ASSERT_OK(r);
  const BruteForceResult want = brute_force_search(costs, o);
  EXPECT_EQ(r->feasible, !tc.launch_counts.empty()) << describe_plan(costs, r->placements, o);
  EXPECT_EQ(want.feasible, !tc.launch_counts.empty());
  if (r->feasible) {
    EXPECT_EQ(r->launch_counts, tc.launch_counts);
    EXPECT_EQ(want.launch_counts, tc.launch_counts);
    EXPECT_TRUE(near_rel(r->iteration_s, want.iteration_s));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Exact, DeltaThresholds,
    ::testing::Values(
        // P = 5/8 s: c = P/10 exactly is not "< P/10", so δ = 2 and N = [3, 1] fits.
        ThresholdCase{"TenthIsDeltaTwo", 0.125, 0.5, {3, 1}},
        // P = 1/8 s: c = P/2 exactly is not "< P/2", so δ = 3: N = 4 does not fit.
        ThresholdCase{"HalfIsDeltaThree", 0.03125, 0.09375, {}},
        // P = 9/64 s: c = 1/16 s is below P/2 = 9/128 s, so δ = 2 and N = [3, 1] fits.
        ThresholdCase{"BelowHalfIsDeltaTwo", 0.046875, 0.09375, {3, 1}}),
    [](const ::testing::TestParamInfo<ThresholdCase>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------
// Infeasible problems.

// Layer 1 holds 8 GiB of fp16 parameters: 64 GiB of training state on every mesh (tp is
// 1 with explicit tables), more than any device has.
TEST(Infeasible, LayerLargerThanEveryDevice) {
  const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: small
subclusters:
  - {name: v100, device: V100-32GB, nodes: 1, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: a100, device: A100-40GB, nodes: 1, devices_per_node: 1}
links:
  - {between: [v100, a100], bandwidth_gbps: 5, latency_ms: 1}
)");
  const int L = 3;
  std::vector<StageCosts::LayerBytes> layers(L, {10 * kMiB, 1 * kMiB, 1e6, {}});
  layers[1].param_bytes = 8 * kGiB;
  Times times;
  for (const char* dev : {"V100-32GB", "A100-40GB"})
    for (int samples : {1, 2}) times[dev][samples] = uniform_times(L, 0.01 / samples);
  const StageCosts costs = StageCosts::from_tables(cluster, layers, times, 2, cost::CostConfig{});

  for (bool allow_idle : {false, true}) {
    SCOPED_TRACE(allow_idle ? "idle devices allowed" : "every device used");
    SearchOptions o;
    o.microbatches = 4;
    o.allow_idle_devices = allow_idle;
    StatusOr<SearchResult> r = search_pipeline(costs, o);
    HARP_ASSERT_OK(r);
    EXPECT_FALSE(r->feasible);
    EXPECT_TRUE(r->placements.empty());
    EXPECT_FALSE(r->infeasible_reason.empty());
    // The reason names the layer and the shortfall.
    EXPECT_NE(r->infeasible_reason.find("layer 1"), std::string::npos) << r->infeasible_reason;
    EXPECT_NE(r->infeasible_reason.find("short"), std::string::npos) << r->infeasible_reason;
    const BruteForceResult want = brute_force_search(costs, o);
    EXPECT_FALSE(want.feasible);
    EXPECT_GT(want.plans_enumerated, 0);
    EXPECT_EQ(want.plans_memory_feasible, 0);
  }
}

// Every layer fits alone, but the δ rule's launch counts do not: the schedule makes the
// problem infeasible, and both sides see it.
TEST(Infeasible, LaunchCountsExceedMemory) {
  const cluster::Cluster cluster = cluster_from_yaml(R"(
version: 1
name: tight
devices:
  - {name: Tiny, peak_tflops: 10, memory_gib: 1, memory_bandwidth_gbs: 300}
subclusters:
  - {name: a, device: Tiny, nodes: 1, devices_per_node: 1}
  - {name: b, device: Tiny, nodes: 1, devices_per_node: 1}
links:
  - {between: [a, b], bandwidth_gbps: 1, latency_ms: 1}
)");
  // 0.9 GiB usable - 256 MiB workspace leaves ~665 MiB; 2 layers of 8 MiB params (64 MiB
  // state each) and 200 MiB of activations each per microbatch.
  const int L = 2;
  std::vector<StageCosts::LayerBytes> layers(L, {8 * kMiB, 200 * kMiB, 4e6, {}});
  Times times;
  times["Tiny"][1] = uniform_times(L, 0.01);
  const StageCosts costs = StageCosts::from_tables(cluster, layers, times, 1, cost::CostConfig{});
  SearchOptions o;
  o.microbatches = 8;
  // c = 4 MB / 125 MB/s + 1 ms = 33 ms >= P/2 = 5 ms: δ = 3, so the head stage keeps
  // 4 microbatches (800 MiB of activations); one stage on one device is not allowed
  // (every device is used), so nothing fits.
  StatusOr<SearchResult> r = search_pipeline(costs, o);
  ASSERT_TRUE(r.ok());
  const BruteForceResult want = brute_force_search(costs, o);
  EXPECT_FALSE(want.feasible);
  EXPECT_FALSE(r->feasible);
  EXPECT_FALSE(r->infeasible_reason.empty());
  // Standard 1F1B keeps 2 microbatches on the head (400 MiB): feasible on both sides.
  o.schedule = plan::ScheduleKind::k1F1B;
  r = search_pipeline(costs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->feasible);
  EXPECT_TRUE(brute_force_search(costs, o).feasible);
  EXPECT_EQ(r->launch_counts, (std::vector<int>{2, 1}));
}

}  // namespace
}  // namespace harp::planner
