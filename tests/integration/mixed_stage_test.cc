// Mixed stages (a stage whose replicas are of two device types; cost/mixed_stage.h) from
// the planner through the simulator: the stage's time is its slowest replica's, its
// all-reduce a ring over its replicas on their slowest link, and the simulator's
// iteration follows the closed form; the search takes a mixed stage where the two pools
// share a fast link and B is small, and not where the link between them is slow.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include "harp/cluster/cluster_io.h"
#include "harp/common/check.h"
#include "harp/common/document.h"
#include "harp/cost/comm_cost.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/strategies.h"
#include "harp/sim/run.h"

namespace harp::planner {
namespace {

cluster::Cluster cluster_of(const std::string& yaml, const std::string& name) {
  auto doc = parse_yaml_text(yaml, name);
  HARP_CHECK(doc.ok()) << doc.status().to_string();
  auto c = cluster::parse_cluster(*doc, name);
  HARP_CHECK(c.ok()) << c.status().to_string();
  return *c;
}

// One A100 beside two V100s (one node), a link between them of `gbps`, and a third pool
// of one V100 behind a 10 Gbit/s link.
cluster::Cluster three_pools(double gbps) {
  const std::string yaml = "subclusters:\n"
                           "  - {name: f, device: A100-80GB, nodes: 1, devices_per_node: 1}\n"
                           "  - {name: s, device: V100-32GB, nodes: 1, devices_per_node: 2,\n"
                           "     intra_node: {bandwidth_gbps: 200, latency_us: 5}}\n"
                           "  - {name: x, device: V100-32GB, nodes: 1, devices_per_node: 1}\n"
                           "links:\n"
                           "  - {between: [f, s], bandwidth_gbps: " + std::to_string(gbps) + ", latency_ms: 0.01}\n"
                           "  - {between: [s, x], bandwidth_gbps: 10, latency_ms: 0.1}\n";
  return cluster_of(yaml, "three.yaml");
}

PlanningProblem problem(const cluster::Cluster& c, int microbatches, int microbatch_size) {
  auto model = model::load_model("gpt-350m", 1);
  EXPECT_TRUE(model.ok());
  return problem_from_model(c, *model, cost::CostConfig{}, nullptr, microbatches, microbatch_size, 1);
}

double simulated_s(const plan::Plan& p) {
  auto run = sim::simulate_plan(p, p.schedule, {false});
  HARP_EXPECT_OK(run);
  return run.ok() ? run->result.iteration_s() : 0;
}

TEST(MixedStage, SlowestReplicaAndTheAllReduceOverTheSlowestLink) {
  const cluster::Cluster c = three_pools(100);
  const PlanningProblem pr = problem(c, 1, 8);
  const int L = pr.costs.num_layers(), cut = L - 3;
  Placement m;  // the A100 and both V100s of s
  m.subcluster = 0;
  m.first_layer = 0;
  m.last_layer = cut;
  m.second_subcluster = 1;
  m.second_devices = 2;
  m.second_dp = 2;
  Placement x;
  x.subcluster = 2;
  x.first_layer = cut;
  x.last_layer = L;
  BuildOptions b;
  b.microbatches = 1;
  b.schedule = plan::ScheduleKind::kHarp1F1B;
  const plan::Plan p = build_plan(pr.costs, {m, x}, b);
  const plan::Stage& s = p.stages[0];
  ASSERT_EQ(s.dp, 3);
  ASSERT_EQ(s.shares.size(), 3u);
  EXPECT_EQ(s.shares[0] + s.shares[1] + s.shares[2], 8);
  EXPECT_GT(s.shares[0], s.shares[1]) << "the A100 takes the larger share";
  EXPECT_EQ(s.devices, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(s.replica_devices, (std::vector<std::string>{"A100-80GB", "V100-32GB", "V100-32GB"}));
  // Utilisation is against the devices' summed peaks: the stage's peak is their mean.
  EXPECT_DOUBLE_EQ(s.peak_tflops * 3, c.device_of(0).peak_tflops + 2 * c.device_of(1).peak_tflops);
  // Each replica's time at its share, by hand from the cost path; the stage's is the slowest.
  Seconds slowest = 0;
  for (int d = 0; d < 3; ++d) {
    const StageFigures f = pr.costs.replica_figures(d == 0 ? 0 : 1, s.shares[d], 1, 0, cut);
    EXPECT_DOUBLE_EQ(s.replica_compute_s[d], f.fwd_s + f.bwd_s);
    slowest = std::max(slowest, f.fwd_s + f.bwd_s);
  }
  EXPECT_DOUBLE_EQ(s.compute_s(), slowest);
  // No other split of the 8 samples (each replica at least one) has a faster slowest.
  for (int a = 1; a <= 6; ++a)
    for (int v = 1; a + v <= 7; ++v) {
      Seconds worst = 0;
      for (auto [sub, n] : {std::pair{0, a}, {1, v}, {1, 8 - a - v}}) {
        const StageFigures f = pr.costs.replica_figures(sub, n, 1, 0, cut);
        worst = std::max(worst, f.fwd_s + f.bwd_s);
      }
      EXPECT_GE(worst, slowest * (1 - 1e-12)) << a << ":" << v << ":" << 8 - a - v;
    }
  // A ring of 3 over the slowest link among them: f-s (100 Gbit/s), not s's node (200).
  const Bytes grads = pr.costs.param_bytes(0, cut) * pr.costs.config().gradient_bytes_per_param_byte;
  cluster::Link slow = *c.link_between(0, 1);
  slow.latency_s = std::max(slow.latency_s, c.subclusters[1].intra_node.latency_s);
  // (The tied embedding's sync adds the same to the first and the last stage.)
  EXPECT_NEAR(s.allreduce_s, cost::ring_allreduce_s(grads, 3, slow) + p.stages[1].allreduce_s, 1e-12);
  // The transfer out of the stage: both parts send to x; the A100's path crosses s.
  EXPECT_NEAR(s.comm_s, cost::p2p_s(s.comm_bytes, c.path_link(0, 2)), 1e-15);
  EXPECT_TRUE(s.crosses_nodes);
  // One microbatch runs stage by stage: the simulator's iteration is the closed form's
  // (with the step's two all-ranks reductions, which the closed form leaves out).
  const double sim = simulated_s(p);
  EXPECT_NEAR(sim, p.predicted.iteration_s + 2 * sim::step_sync_s(p), 1e-8 * sim);
  // With many microbatches the period is the slowest replica's time: each added
  // microbatch adds P to the simulated iteration.
  BuildOptions many = b;
  many.microbatches = 16;
  plan::Plan p16 = build_plan(pr.costs, {m, x}, many);
  many.microbatches = 24;
  plan::Plan p24 = build_plan(pr.costs, {m, x}, many);
  const Seconds P = std::max({slowest, p16.stages[1].compute_s(), p16.stages[0].comm_s});
  ASSERT_DOUBLE_EQ(p16.predicted.period_s, P);
  EXPECT_NEAR(simulated_s(p24) - simulated_s(p16), 8 * P, 1e-6 * P);
}

// Where the two pools share a fast link and B is small, a mixed stage wins (the pipeline
// is shorter and the microbatch is split by speed); over a slow link its all-reduce costs
// more than it gains and the search keeps stages of one type. Either way the search with
// mixed stages is never slower than without (its space holds every plan of the other).
TEST(MixedStage, TheSearchTakesItOverAFastLinkOnly) {
  for (double gbps : {100.0, 0.5}) {
    SCOPED_TRACE("f-s link " + std::to_string(gbps) + " Gbit/s");
    const PlanningProblem pr = problem(three_pools(gbps), 1, 8);
    SearchOptions plain, mixed;
    mixed.mixed_stages = true;
    const StrategyResult without = run_strategy(pr, plan::Strategy::kHarp, plain);
    const StrategyResult with = run_strategy(pr, plan::Strategy::kHarp, mixed);
    ASSERT_TRUE(without.feasible && with.feasible) << without.reason << with.reason;
    EXPECT_LE(with.plan.predicted.iteration_s, without.plan.predicted.iteration_s * (1 + 1e-12));
    const bool took = std::any_of(with.plan.stages.begin(), with.plan.stages.end(),
                                  [](const plan::Stage& s) { return s.mixed(); });
    if (gbps > 1) {
      EXPECT_TRUE(took);
      EXPECT_LT(with.plan.predicted.iteration_s, without.plan.predicted.iteration_s * 0.9);
      EXPECT_LT(simulated_s(with.plan), simulated_s(without.plan) * 0.9);
      // The candidates a schedule choice weighs: the plans both searches met (the second
      // meets only plans with a mixed stage), by closed-form T.
      SearchOptions weighed = mixed;
      weighed.candidates = 16;
      const StrategyResult c = run_strategy(pr, plan::Strategy::kHarp, weighed);
      ASSERT_FALSE(c.candidates.empty());
      EXPECT_TRUE(std::any_of(c.candidates.begin(), c.candidates.end(), [](const plan::Plan& p) {
        return std::none_of(p.stages.begin(), p.stages.end(), [](const plan::Stage& s) { return s.mixed(); });
      }));
      for (size_t i = 1; i < c.candidates.size(); ++i)
        EXPECT_LE(c.candidates[i - 1].predicted.iteration_s, c.candidates[i].predicted.iteration_s);
    } else {
      EXPECT_FALSE(took) << plan::plan_to_json(with.plan).dump();
    }
  }
}

// The second search (plans holding a mixed stage) on several lanes fills the same tables
// as on one: the plan, its time and the counts, on a cluster wide enough for the lanes
// (72 devices: each layer has 72 states) where the answer holds a mixed stage; 3 lanes
// on 2 cores too.
TEST(MixedStage, EveryCoreGivesTheOneCorePlan) {
  const cluster::Cluster cluster = cluster_of(R"(
subclusters:
  - {name: f, device: A100-80GB, nodes: 2, devices_per_node: 8,
     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: s, device: V100-32GB, nodes: 7, devices_per_node: 8,
     intra_node: {bandwidth_gbps: 1200, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}
links:
  - {between: [f, s], bandwidth_gbps: 200, latency_ms: 0.01}
)",
                                              "wide.yaml");
  auto model = model::load_model("gpt-350m", 1);
  HARP_ASSERT_OK(model.status());
  const PlanningProblem pr = problem_from_model(cluster, *model, cost::CostConfig{}, nullptr, 2, 8, 8);
  std::string first_stages;
  SearchStats first;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " lanes");
    SearchOptions options;
    options.mixed_stages = true;
    options.threads = threads;
    const StrategyResult r = run_strategy(pr, plan::Strategy::kHarp, options);
    ASSERT_TRUE(r.feasible) << r.reason;
    const std::string stages = plan::plan_to_json(r.plan)["stages"].dump();
    if (threads == 1) {
      EXPECT_TRUE(std::any_of(r.plan.stages.begin(), r.plan.stages.end(), [](const plan::Stage& s) { return s.mixed(); }))
          << stages;
      first_stages = stages;
      first = r.stats;
      continue;
    }
    EXPECT_EQ(stages, first_stages);
    EXPECT_EQ(r.stats.dp_runs, first.dp_runs);
    EXPECT_EQ(r.stats.states_visited, first.states_visited);
    EXPECT_EQ(r.stats.front_entries, first.front_entries);
  }
}

}  // namespace
}  // namespace harp::planner
