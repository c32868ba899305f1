// Cost model against hand arithmetic: roofline, ring all-reduce, p2p, memory, and the
// profile DB taking precedence over the analytic estimate.
#include <gtest/gtest.h>

#include "harp/cluster/cluster_io.h"
#include "harp/cost/cost_model.h"
#include "harp/job/job.h"
#include "harp/planner/uniform.h"

namespace harp::cost {
namespace {

cluster::Cluster test_cluster() {
  auto doc = parse_yaml_text(R"(
version: 1
subclusters:
  - {name: v, device: V100-32GB, nodes: 1, devices_per_node: 4,
     intra_node: {bandwidth_gbps: 800, latency_us: 0}}
  - {name: a, device: A100-40GB, nodes: 2, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 800, latency_us: 0},
     inter_node: {bandwidth_gbps: 80, latency_us: 0}}
links: [{between: [v, a], bandwidth_gbps: 8, latency_ms: 1}]
)", "c.yaml");
  return cluster::parse_cluster(*doc, "c.yaml").value();
}

TEST(CommCost, P2pAndRing) {
  cluster::Link l{8.0, 0.001};  // 8 Gbit/s = 1e9 B/s
  EXPECT_DOUBLE_EQ(p2p_s(1e9, l), 1.001);
  EXPECT_DOUBLE_EQ(p2p_s(0, l), 0.0);
  // Ring over 4 ranks moves 2 * 3/4 of the buffer per rank.
  EXPECT_DOUBLE_EQ(ring_allreduce_s(4e9, 4, l), 2 * 0.75 * 4.0 + 0.001);
  EXPECT_DOUBLE_EQ(ring_allreduce_s(4e9, 1, l), 0.0);
}

TEST(ComputeCost, RooflineComputeBound) {
  auto c = test_cluster();
  model::Layer l;
  l.fwd_flops = 1e12;  // per sample
  l.param_bytes = 0;
  l.mem_traffic_bytes = 1e6;
  CostConfig cfg;
  cfg.compute_efficiency = 0.5;
  // V100: 125 TFLOP/s x 0.5 = 62.5e12 FLOP/s; 4 samples = 4e12 FLOPs -> 0.064 s.
  LayerTime t = analytic_layer_time(l, c.device_of(0), 4, 1, c.subclusters[0].intra_node, cfg);
  EXPECT_DOUBLE_EQ(t.fwd_s, 4e12 / 62.5e12);
  EXPECT_DOUBLE_EQ(t.bwd_s, 2 * 4e12 / 62.5e12);
  // tp = 2 halves the compute; this layer has no tp collective (no output projection).
  LayerTime t2 = analytic_layer_time(l, c.device_of(0), 4, 2, c.subclusters[0].intra_node, cfg);
  EXPECT_DOUBLE_EQ(t2.fwd_s, t.fwd_s / 2);
}

TEST(ComputeCost, RooflineMemoryBound) {
  auto c = test_cluster();
  model::Layer l;
  l.fwd_flops = 1;
  l.param_bytes = 0;
  l.mem_traffic_bytes = 1e9;
  CostConfig cfg;
  cfg.memory_efficiency = 0.5;
  // A100-40GB: 1555 GB/s x 0.5.
  LayerTime t = analytic_layer_time(l, c.device_of(1), 1, 1, c.subclusters[1].intra_node, cfg);
  EXPECT_DOUBLE_EQ(t.fwd_s, 1e9 / (1555e9 * 0.5));
}

TEST(CostModel, ProfileDbWinsOverAnalytic) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  ASSERT_TRUE(m.ok());
  profile::ProfileDb db;
  profile::ProfileEntry e;
  e.key = {"A100-40GB", m->layers[1].signature, 2, 1};
  e.fwd_s = 0.125;
  e.bwd_s = 0.25;
  db.put(e);
  CostModel costs(c, *m, &db, CostConfig{});
  LayerTime t = costs.layer_time(1, 5, 2, 1);  // every block shares the signature
  EXPECT_TRUE(t.measured);
  EXPECT_DOUBLE_EQ(t.fwd_s, 0.125);
  EXPECT_FALSE(costs.layer_time(1, 5, 4, 1).measured);  // other microbatch size
  EXPECT_FALSE(costs.layer_time(0, 5, 2, 1).measured);  // other device
  // A stage of 3 blocks with dp = 2 runs 2 samples per replica.
  StageTime st = costs.stage_time(1, 2, 5, 4, 2, 1);
  EXPECT_EQ(st.measured_layers, 3);
  EXPECT_DOUBLE_EQ(st.fwd_s, 3 * 0.125);
}

TEST(CostModel, MemoryByHand) {
  auto m = model::load_model("gpt-350m");
  CostConfig cfg;
  cfg.workspace_bytes = 0;
  StageMemory mem = stage_memory(*m, 1, 3, 8, 2, 1, cfg);
  const double params = m->layers[1].param_bytes + m->layers[2].param_bytes;
  EXPECT_DOUBLE_EQ(mem.static_bytes, 8.0 * params);  // 16 bytes per fp16 parameter
  EXPECT_DOUBLE_EQ(mem.activation_bytes, 4 * (m->layers[1].activation_bytes + m->layers[2].activation_bytes));
  EXPECT_DOUBLE_EQ(mem.total(3), mem.static_bytes + 3 * mem.activation_bytes);
}

TEST(CostModel, AllreduceUsesTheNodeLinkInsideANode) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  CostModel costs(c, *m, nullptr, CostConfig{});
  const double grads = m->layers[1].param_bytes;
  EXPECT_DOUBLE_EQ(costs.allreduce_s(0, 1, 2, 4, 1), ring_allreduce_s(grads, 4, c.subclusters[0].intra_node));
  EXPECT_DOUBLE_EQ(costs.allreduce_s(1, 1, 2, 4, 1), ring_allreduce_s(grads, 4, c.subclusters[1].inter_node));
  EXPECT_DOUBLE_EQ(costs.allreduce_s(1, 1, 2, 1, 1), 0.0);
}

TEST(UniformPlan, OneStagePerNodeEqualLayers) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m", 2);  // 50 layers over 3 nodes: 17, 17, 16
  ASSERT_TRUE(m.ok());
  CostModel model_costs(c, *m, nullptr, CostConfig{});
  auto costs = planner::StageCosts::from_cost_model(model_costs, 4, 4);
  planner::BuildOptions o;
  o.microbatches = 16;
  auto p = planner::plan_uniform(costs, o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->num_stages(), 3);
  EXPECT_EQ(p->stages[0].last_layer - p->stages[0].first_layer, 17);
  EXPECT_EQ(p->stages[1].last_layer - p->stages[1].first_layer, 17);
  EXPECT_EQ(p->stages[2].last_layer, 50);
  EXPECT_EQ(p->stages[0].dp, 4);
  EXPECT_EQ(p->stages[1].devices, (std::vector<int>{4, 5}));
  EXPECT_EQ(p->stages[2].devices, (std::vector<int>{6, 7}));
  EXPECT_TRUE(p->stages[0].crosses_nodes);
  EXPECT_TRUE(p->stages[1].crosses_nodes);  // the two A100 nodes: a link between nodes
  // Boundary 0 uses the 8 Gbit/s cross link, boundary 1 the A100 inter-node link.
  const double bytes = m->layers[16].output_bytes * 4;
  EXPECT_DOUBLE_EQ(p->stages[0].comm_s, bytes / 1e9 + 1e-3);
  EXPECT_DOUBLE_EQ(p->stages[1].comm_s, bytes / 1e10);
  EXPECT_EQ(p->stages[0].launch_count, 3);  // standard 1F1B
}

TEST(UniformPlan, MoreNodesThanLayersIsInfeasible) {
  auto c = test_cluster();
  model::GptConfig g = model::gpt_preset("gpt-tiny").value();
  g.num_blocks = 1;
  g.granularity = 1;
  auto m = model::build_gpt(g);  // 3 layers, 3 nodes: fits exactly
  CostModel model_costs(c, *m, nullptr, CostConfig{});
  EXPECT_TRUE(planner::plan_uniform(planner::StageCosts::from_cost_model(model_costs, 4, 4), {}).ok());
  c.subclusters[1].nodes = 3;
  CostModel more_nodes(c, *m, nullptr, CostConfig{});
  auto p = planner::plan_uniform(planner::StageCosts::from_cost_model(more_nodes, 4, 4), {});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInfeasible);
}

TEST(Job, LoadsTheDemoJob) {
  auto j = job::load_job(std::string(HARP_SOURCE_DIR) + "/examples/jobs/demo.yaml");
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ(j->model.num_layers(), 50);
  EXPECT_EQ(j->cluster.num_devices(), 12);
  EXPECT_EQ(j->planner.microbatches, 32);
  EXPECT_TRUE(j->resolved.contains("cluster"));
}

TEST(Job, BadSectionsNameTheirPath) {
  auto bad = [](const std::string& yaml) {
    auto doc = parse_yaml_text(yaml, "job.yaml");
    return job::parse_job(*doc, "job.yaml").status().message();
  };
  const std::string cl =
      "cluster: {subclusters: [{name: a, device: T4, nodes: 1, devices_per_node: 1}]}\n";
  EXPECT_NE(bad(cl).find("model"), std::string::npos);
  EXPECT_NE(bad(cl + "model: {preset: gpt-tiny}\nplanner: {microbatches: 0}\n").find("planner.microbatches"),
            std::string::npos);
  EXPECT_NE(bad(cl + "model: {preset: gpt-tiny}\ncost: {compute_efficiency: 2}\n").find("cost.compute_efficiency"),
            std::string::npos);
  EXPECT_NE(bad(cl + "model: {preset: gpt-tiny}\nschedule: {kind: zb}\n").find("schedule.kind"),
            std::string::npos);
  EXPECT_NE(bad("cluster: missing.yaml\nmodel: {preset: gpt-tiny}\n").find("missing.yaml"),
            std::string::npos);
}

}  // namespace
}  // namespace harp::cost
