// The one cost path against hand arithmetic and direct sums: roofline, ring all-reduce,
// p2p, memory, the profile DB taking precedence over the analytic estimate, and the
// range figures of every source equal to a per-layer sum.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include "harp/cluster/cluster_io.h"
#include <cmath>
#include <random>

#include "harp/cost/compute_cost.h"
#include "harp/cost/mixed_stage.h"
#include "harp/cost/stage_costs.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/plan_builder.h"
#include "harp/planner/strategies.h"
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

// A tp = 1 profile entry for (device, signature, samples).
void put_entry(profile::ProfileDb& db, const std::string& device, const std::string& signature, int samples,
               Seconds fwd_s, Seconds bwd_s) {
  profile::ProfileEntry e;
  e.key = {device, signature, samples, 1};
  e.fwd_s = fwd_s;
  e.bwd_s = bwd_s;
  db.put(e);
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
  cfg.efficiency_given = true;  // as a job's cost section sets it: every device's fp16/bf16 peak
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

TEST(LayerCosts, ProfileDbWinsOverAnalytic) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  ASSERT_TRUE(m.ok());
  profile::ProfileDb db;
  put_entry(db, "A100-40GB", m->layers[1].signature, 2, 0.125, 0.25);
  ProfiledCosts costs(*m, db, CostConfig{}, "p.json");
  auto t = costs.time(c, 1, 5, 2, 1);  // every block shares the signature
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->source, CostSource::kProfile);
  EXPECT_DOUBLE_EQ(t->fwd_s, 0.125);
  EXPECT_EQ(costs.time(c, 1, 5, 4, 1)->source, CostSource::kAnalytic);  // other microbatch size
  EXPECT_EQ(costs.time(c, 0, 5, 2, 1)->source, CostSource::kAnalytic);  // other device
  // A stage of 3 blocks with dp = 2 runs 2 samples per replica: all three measured.
  StageCosts sc = StageCosts::build(c, costs, 4, 1, CostConfig{});
  StageFigures st = sc.stage(1, 2, 5, 2, 1);
  EXPECT_DOUBLE_EQ(st.fwd_s, 3 * 0.125);
  EXPECT_EQ(sc.stage_source(1, 2, 5, 2, 1), "profile");
  EXPECT_EQ(sc.stage_source(1, 0, 5, 2, 1), "profile+analytic");  // the head has no entry
  EXPECT_EQ(sc.stage_source(1, 2, 5, 1, 1), "analytic");          // 4 samples: no entry
  EXPECT_NE(sc.source_description().find("p.json"), std::string::npos);
}

TEST(StageCosts, MemoryByHand) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  CostConfig cfg;
  cfg.workspace_bytes = 0;
  AnalyticCosts src(*m, cfg);
  StageCosts sc = StageCosts::build(c, src, 8, 1, cfg);
  StageFigures f = sc.stage(0, 1, 3, 2, 1);
  const double params = m->layers[1].param_bytes + m->layers[2].param_bytes;
  // 16 bytes per fp16 parameter, and what a block's backward holds for a moment: the
  // gradient of its largest weight (FC1, h x f, in the master dtype: 1 x the fp16 bytes
  // by default) and, per sample, its widest temporary: the gradients of the QKV output
  // (3h), of the attention probabilities and scores (2·a·s) or of the MLP's hidden (f).
  const double h = m->gpt.hidden, s = m->gpt.seq_len, ffn = m->gpt.ffn_hidden, a = m->gpt.heads;
  EXPECT_DOUBLE_EQ(f.working_bytes, 2 * h * ffn + 4 * s * std::max({2 * 3 * h, 2 * 2 * a * s, 2 * ffn}));
  EXPECT_DOUBLE_EQ(f.static_bytes, 8.0 * params + f.working_bytes);
  // Kept per sample, and the stage's output (2·s·h) until its backward; 4 samples.
  EXPECT_DOUBLE_EQ(f.activation_bytes, 4 * (m->layers[1].activation_bytes + m->layers[2].activation_bytes + 2 * s * h));
  EXPECT_DOUBLE_EQ(f.memory_bytes(3), f.static_bytes + 3 * f.activation_bytes);
}

// Uneven shares: a replica's times at every sample count, the even ones those of the
// stage's dp split; the best split over a V100 and an A100 replica against every
// composition of the microbatch (replica_figures, best_mixed_shares).
TEST(StageCosts, ReplicaTimesAtEverySampleCountAndTheBestMixedShares) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  AnalyticCosts src(*m, CostConfig{});
  const int mbs = 8, first = 1, last = 9;
  StageCosts sc = StageCosts::build(c, src, mbs, 1, CostConfig{});
  for (int sub : {0, 1})
    for (int dp : {1, 2, 4, 8}) {
      const StageFigures whole = sc.stage(sub, first, last, dp, 1, Recompute::kFull);
      const StageFigures one = sc.replica_figures(sub, mbs / dp, 1, first, last, Recompute::kFull);
      EXPECT_DOUBLE_EQ(one.fwd_s, whole.fwd_s);
      EXPECT_DOUBLE_EQ(one.bwd_s, whole.bwd_s);
      EXPECT_DOUBLE_EQ(one.bwd_weight_s, whole.bwd_weight_s);
    }
  for (int n = 1; n <= mbs; ++n) ASSERT_TRUE(sc.has_samples(0, n, 1)) << n << " samples";
  EXPECT_FALSE(sc.has_samples(0, mbs + 1, 1));
  auto t = [&](int sub, int n) {
    const StageFigures f = sc.replica_figures(sub, n, 1, first, last);
    return f.fwd_s + f.bwd_s;
  };
  for (int n = 2; n <= mbs; ++n) EXPECT_GE(t(0, n), t(0, n - 1)) << "non-decreasing in the samples";
  auto split = sc.best_mixed_shares({{0, 1}, {1, 1}}, first, last);
  ASSERT_TRUE(split.has_value());
  Seconds best = 1e30;
  for (int n = 1; n < mbs; ++n) best = std::min(best, std::max(t(0, n), t(1, mbs - n)));
  EXPECT_DOUBLE_EQ(split->slowest_s, best);
  EXPECT_EQ(split->shares[0] + split->shares[1], mbs);
  EXPECT_LT(split->shares[0], split->shares[1]) << "the A100 takes more than the V100";
  EXPECT_LT(split->slowest_s, std::max(t(0, mbs / 2), t(1, mbs / 2))) << "better than the even split";
}

// A mixed stage's split (two parts, each even inside) against the general exact split
// over every replica (best_mixed_shares); its all-reduce is a ring over every replica on
// the slowest link among them, here the 8 Gbit/s link between the subclusters.
TEST(MixedView, SplitMatchesTheExactSplitOverEveryReplica) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  AnalyticCosts src(*m, CostConfig{});
  const int mbs = 8;
  StageCosts sc = StageCosts::build(c, src, mbs, 1, CostConfig{});
  for (auto [da, db] : {std::pair{1, 1}, {1, 2}, {2, 1}, {1, 3}, {3, 2}, {2, 6}}) {
    const cost::MixedGroup g{0, da, 1, db, 1};
    ASSERT_TRUE(cost::has_mixed(sc, g));
    const cost::MixedView v = cost::mixed_view(sc, g);
    std::vector<std::pair<int, int>> replicas(da, {0, 1});
    replicas.insert(replicas.end(), db, {1, 1});
    for (auto [first, last] : {std::pair{0, 3}, {1, 9}, {4, 5}}) {
      const cost::MixedSplit split = v.split(first, last);
      const auto exact = sc.best_mixed_shares(replicas, first, last);
      ASSERT_TRUE(exact.has_value());
      EXPECT_DOUBLE_EQ(split.slowest_s, exact->slowest_s) << da << "+" << db << " on [" << first << ", " << last << ")";
      const std::vector<int> shares = v.shares(split);
      ASSERT_EQ(static_cast<int>(shares.size()), da + db);
      int sum = 0;
      Seconds slowest = 0;
      for (int d = 0; d < da + db; ++d) {
        sum += shares[d];
        EXPECT_GE(shares[d], 1);
        slowest = std::max(slowest, v.replica_s(d >= da, shares[d], first, last, Recompute::kNone));
      }
      EXPECT_EQ(sum, mbs);
      EXPECT_DOUBLE_EQ(slowest, split.slowest_s);
    }
    const double grads = sc.param_bytes(1, 3);
    EXPECT_NEAR(v.allreduce_s(1, 3), ring_allreduce_s(grads, da + db, *c.link_between(0, 1)), 1e-12);
  }
  EXPECT_FALSE(cost::has_mixed(sc, {0, 4, 1, 5, 1})) << "more replicas than samples";
}

TEST(StageCosts, AllreduceUsesTheNodeLinkInsideANode) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  AnalyticCosts src(*m, CostConfig{});
  StageCosts sc = StageCosts::build(c, src, 4, 1, CostConfig{});
  const double grads = m->layers[1].param_bytes;
  EXPECT_DOUBLE_EQ(sc.stage(0, 1, 2, 4, 1).allreduce_s, ring_allreduce_s(grads, 4, c.subclusters[0].intra_node));
  EXPECT_DOUBLE_EQ(sc.stage(1, 1, 2, 4, 1).allreduce_s, ring_allreduce_s(grads, 4, c.subclusters[1].inter_node));
  EXPECT_DOUBLE_EQ(sc.stage(1, 1, 2, 1, 1).allreduce_s, 0.0);
}

// A measured drift (elastic re-planning) scales one subcluster's compute, not its device
// type's: two subclusters of one type, one drifted 2.5x, the other unchanged.
TEST(StageCosts, ComputeDriftScalesOneSubclusterNotItsDeviceType) {
  auto c = test_cluster();
  c.subclusters[1].device = c.subclusters[0].device;  // both V100
  auto m = model::load_model("gpt-350m");
  AnalyticCosts src(*m, CostConfig{});
  const StageCosts plain = StageCosts::build(c, src, 4, 1, CostConfig{});
  CostConfig drifted_config;
  drifted_config.compute_drift["a"] = 2.5;
  const StageCosts drifted = StageCosts::build(c, src, 4, 1, drifted_config);
  for (int sub : {0, 1}) {
    const auto before = plain.stage(sub, 1, 5, 1, 1), after = drifted.stage(sub, 1, 5, 1, 1);
    const double f = sub == 1 ? 2.5 : 1.0;
    EXPECT_NEAR(after.fwd_s, f * before.fwd_s, 1e-12 * before.fwd_s) << sub;
    EXPECT_NEAR(after.bwd_s, f * before.bwd_s, 1e-12 * before.bwd_s) << sub;
    EXPECT_DOUBLE_EQ(after.allreduce_s, before.allreduce_s);  // links do not drift with compute
  }
}

// Recomputation against closed forms: Korthikanti et al.'s 34·s·h per block under
// selective (the 2·a·s² probabilities freed), a block's 2·s·h input under full, and the
// repeated forward (the whole block's, or the attention core's 4·s²·h share).
TEST(StageCosts, RecomputationByHand) {
  auto c = test_cluster();
  CostConfig cfg;
  for (int k : {1, 4}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    auto m = model::load_model("gpt-350m", k);
    ASSERT_TRUE(m.ok());
    const double h = m->gpt.hidden, s = m->gpt.seq_len, a = m->gpt.heads;
    AnalyticCosts src(*m, cfg);
    StageCosts sc = StageCosts::build(c, src, 2, 1, cfg);
    const RangeView v = sc.view(0, 1, 1);
    // Two whole blocks.
    const int first = 1 + 3 * k, last = 1 + 5 * k;
    EXPECT_DOUBLE_EQ(sc.kept_bytes(first, last, Recompute::kNone), 2 * s * (32 * h + 2 * a * s));
    EXPECT_DOUBLE_EQ(sc.kept_bytes(first, last, Recompute::kSelective), 2 * s * 32 * h);
    EXPECT_DOUBLE_EQ(sc.kept_bytes(first, last, Recompute::kFull), 2 * 2 * s * h);
    // The embedding and the LM head keep their activations under full.
    const int L = m->num_layers();
    EXPECT_DOUBLE_EQ(sc.kept_bytes(0, L, Recompute::kFull),
                     m->layers[0].activation_bytes + m->layers[L - 1].activation_bytes + m->gpt.num_blocks * 2 * s * h);
    double fwd = 0, attention = 0;
    for (int i = first; i < last; ++i) {
      const double t = src.time(c, 0, i, 2, 1)->fwd_s;
      fwd += t;
      if (m->layers[i].pieces & 2) attention += t * (4 * s * s * h) / m->layers[i].fwd_flops;
    }
    EXPECT_NEAR(v.recompute_s(first, last, Recompute::kFull), fwd, 1e-15);
    EXPECT_NEAR(v.recompute_s(first, last, Recompute::kSelective), attention, 1e-15);
    EXPECT_GT(attention, 0);
    EXPECT_EQ(v.recompute_s(first, last, Recompute::kNone), 0.0);
    // The stage figures: backward includes the repeated forward, memory what is kept.
    const StageFigures none = v.at(first, last), full = v.at(first, last, Recompute::kFull);
    EXPECT_EQ(full.fwd_s, none.fwd_s);
    EXPECT_DOUBLE_EQ(full.bwd_s, none.bwd_s + fwd);
    EXPECT_EQ(v.compute_s(first, last, Recompute::kFull), full.fwd_s + full.bwd_s);  // bit for bit
    EXPECT_DOUBLE_EQ(full.activation_bytes, 2 * (2 * 2 * s * h + 2 * s * h));        // 2 samples, the output held
    if (k == 4) {
      // A stage starting inside block 3 (at attn_out) keeps that layer's input,
      // [q, k, v, residual], then block 4's input.
      EXPECT_DOUBLE_EQ(sc.kept_bytes(first + 1, last, Recompute::kFull), 2 * 4 * h * s + 2 * h * s);
    }
  }
}

// The property the planner relies on: for every source, the O(1) range figures equal a
// direct per-layer sum of that source's numbers (times, bytes, all-reduce, optimizer,
// memory), over random ranges and shapes.
TEST(StageCosts, RangeFiguresEqualADirectSumForEverySource) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m", 2);
  ASSERT_TRUE(m.ok());
  const CostConfig cfg;
  const int mbs = 4;
  profile::ProfileDb db;
  for (int i = 1; i < m->num_layers(); i += 3) {
    put_entry(db, "V100-32GB", m->layers[i].signature, 2, 1e-3 * i, 2e-3 * i);
  }
  AnalyticCosts analytic(*m, cfg);
  ProfiledCosts profiled(*m, db, cfg, "db.json");
  DeviceTimes times;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(1e-4, 1e-2);
  for (const char* dev : {"V100-32GB", "A100-40GB"})
    for (int samples : {1, 2, 4}) {
      LayerTimes t;
      for (int i = 0; i < m->num_layers(); ++i) {
        t.fwd_s.push_back(u(rng));
        t.bwd_s.push_back(u(rng));
      }
      times[dev][samples] = t;
    }
  TableCosts table(layer_bytes_of(*m), times, "t.json");
  const LayerCostSource* sources[] = {&analytic, &profiled, &table};
  for (const LayerCostSource* src : sources) {
    SCOPED_TRACE(src->describe());
    const int max_tp = src == &table ? 1 : 2;
    StageCosts sc = StageCosts::build(c, *src, mbs, max_tp, cfg);
    std::uniform_int_distribution<int> layer(0, m->num_layers() - 1);
    for (int trial = 0; trial < 300; ++trial) {
      int a = layer(rng), b = layer(rng);
      if (a > b) std::swap(a, b);
      ++b;
      const int sub = trial % 2;
      const int dp = 1 << (trial % 3);  // 1, 2, 4
      const int tp = 1 << (trial / 3 % max_tp);
      ASSERT_TRUE(sc.has(sub, dp, tp));
      const int samples = mbs / dp;
      double fwd = 0, bwd = 0, params = 0, acts = 0, whole = 0, output = 0, working = 0;
      for (int i = a; i < b; ++i) {
        const cost::LayerBytes& lb = src->layers()[i];
        whole += lb.replicated_activation_bytes;
        if (i == b - 1 && b < m->num_layers()) output = lb.output_bytes;
        working = std::max(
            working,
            (lb.largest_weight_bytes * cfg.parameter_bytes_per_param_byte + samples * lb.backward_working_bytes) / tp);
        auto t = src->time(c, sub, i, samples, tp);
        ASSERT_TRUE(t.has_value());
        fwd += t->fwd_s;
        bwd += t->bwd_s;
        params += m->layers[i].param_bytes;
        acts += m->layers[i].activation_bytes;
      }
      StageFigures f = sc.stage(sub, a, b, dp, tp);
      EXPECT_NEAR(f.fwd_s, fwd, 1e-12 * (1 + fwd));
      EXPECT_NEAR(f.bwd_s, bwd, 1e-12 * (1 + bwd));
      EXPECT_DOUBLE_EQ(f.allreduce_s, dp_allreduce_s(params, dp, tp, c.subclusters[sub]));
      EXPECT_NEAR(f.optimizer_s, optimizer_step_s(params, tp, c.device_of(sub), cfg), 1e-15);
      EXPECT_NEAR(f.working_bytes, working, 1e-3);
      EXPECT_NEAR(f.static_bytes, cfg.state_bytes_per_param_byte * params / tp + cfg.workspace_bytes + working, 1e-3);
      EXPECT_NEAR(f.activation_bytes, (acts - whole) * samples / tp + samples * (whole + output), 1e-3);
      EXPECT_DOUBLE_EQ(sc.cut_bytes(b - 1), m->layers[b - 1].output_bytes * mbs);
    }
  }
  // A table has no tp = 2 entries: those shapes are absent, not guessed.
  StageCosts no_tp = StageCosts::build(c, table, mbs, 2, cfg);
  EXPECT_FALSE(no_tp.has(0, 1, 2));
}

TEST(StageCosts, PlanRecordsItsCostSources) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m");
  profile::ProfileDb db;
  put_entry(db, "V100-32GB", m->layers[1].signature, 1, 0.01, 0.02);
  CostConfig cfg;
  cfg.profile_file = "db.json";
  auto problem = planner::problem_from_model(c, *m, cfg, &db, 8, 4, 1);
  auto r = planner::run_strategy(problem, plan::Strategy::kUniform, {});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NE(r.plan.cost_source.find("db.json"), std::string::npos);
  // The V100 node runs dp = 4 on 1 sample each: its blocks are measured, the head is not.
  EXPECT_EQ(r.plan.stages[0].cost_source, "profile+analytic");
  EXPECT_EQ(r.plan.stages[1].cost_source, "analytic");
  auto j = plan::plan_to_json(r.plan);
  EXPECT_EQ(j["stages"][0]["cost_source"], "profile+analytic");
}

TEST(UniformPlan, OneStagePerNodeEqualLayers) {
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m", 2);  // 50 layers over 3 nodes: 17, 17, 16
  ASSERT_TRUE(m.ok());
  AnalyticCosts src(*m, CostConfig{});
  auto costs = StageCosts::build(c, src, 4, 4, CostConfig{});
  planner::BuildOptions o;
  o.microbatches = 16;
  auto p = planner::plan_uniform(costs, o);
  HARP_ASSERT_OK(p);
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

TEST(UniformPlan, TiedEmbeddingSyncEndsTheFirstAndLastStage) {
  // The uniform plan on test_cluster: stage 0 on v (dp 4), stage 2 on a's second node
  // (dp 2); the tied gradient (V x h, fp16, x2 for float32 training) is all-reduced over
  // those 6 replicas across the 8 Gbit/s, 1 ms link.
  auto c = test_cluster();
  auto m = model::load_model("gpt-350m", 2);
  ASSERT_TRUE(m.ok());
  CostConfig cfg;
  cfg.gradient_bytes_per_param_byte = 2;
  auto problem = planner::problem_from_model(c, *m, cfg, nullptr, 16, 4, 1);
  auto r = planner::run_strategy(problem, plan::Strategy::kUniform, {});
  ASSERT_TRUE(r.feasible) << r.reason;
  auto untied_model = *m;
  untied_model.gpt.tied_embeddings = false;
  auto untied = planner::run_strategy(planner::problem_from_model(c, untied_model, cfg, nullptr, 16, 4, 1),
                                      plan::Strategy::kUniform, {});
  ASSERT_TRUE(untied.feasible);
  const double bytes = 2.0 * 2 * m->gpt.vocab * m->gpt.hidden;
  const double ring = 2.0 * 5 / 6 * bytes / 1e9 + 1e-3;  // 2 (n-1)/n of the buffer, plus latency
  EXPECT_NEAR(r.plan.stages[0].allreduce_s - untied.plan.stages[0].allreduce_s, ring, 1e-9);
  EXPECT_NEAR(r.plan.stages[2].allreduce_s - untied.plan.stages[2].allreduce_s, ring, 1e-9);
  EXPECT_DOUBLE_EQ(r.plan.stages[1].allreduce_s, untied.plan.stages[1].allreduce_s);
}

TEST(UniformPlan, TiedSyncInsideOneNodeUsesItsNodeLink) {
  // One subcluster, one node of 4 devices: both ends of the tied pair are on that node, so
  // the sync crosses the intra-node link (a one-node subcluster has no inter-node link).
  auto doc = parse_yaml_text(R"(
version: 1
subclusters:
  - {name: p, device: V100-32GB, nodes: 1, devices_per_node: 4,
     intra_node: {bandwidth_gbps: 800, latency_us: 5}}
links: []
)", "one.yaml");
  auto c = cluster::parse_cluster(*doc, "one.yaml").value();
  auto m = model::load_model("gpt-350m", 2);
  ASSERT_TRUE(m.ok());
  auto costs = planner::problem_from_model(c, *m, CostConfig{}, nullptr, 8, 1, 1).costs;
  planner::Placement a, b;
  a.subcluster = b.subcluster = 0;
  a.first_layer = 0;
  a.last_layer = b.first_layer = 25;
  b.last_layer = 50;
  a.dp = b.dp = a.devices = b.devices = 1;
  b.first_local = 1;
  planner::BuildOptions o;
  o.microbatches = 8;
  const plan::Plan p = planner::build_plan(costs, {a, b}, o);
  const double ring = 2.0 * 1 / 2 * (2.0 * m->gpt.vocab * m->gpt.hidden) / 100e9 + 5e-6;
  EXPECT_NEAR(p.stages[0].allreduce_s, ring, 1e-12);
  EXPECT_NEAR(p.stages[1].allreduce_s, ring, 1e-12);
  EXPECT_TRUE(std::isfinite(p.predicted.iteration_s));
}

TEST(ClusterPaths, UndeclaredPairsTakeTheChain) {
  auto doc = parse_yaml_text(R"(
version: 1
subclusters:
  - {name: x, device: V100-32GB, nodes: 1, devices_per_node: 1}
  - {name: y, device: V100-32GB, nodes: 1, devices_per_node: 1}
  - {name: z, device: V100-32GB, nodes: 1, devices_per_node: 1}
links: [{between: [x, y], bandwidth_gbps: 8, latency_ms: 1}, {between: [y, z], bandwidth_gbps: 2, latency_ms: 3}]
)", "p.yaml");
  auto c = cluster::parse_cluster(*doc, "p.yaml").value();
  std::string path;
  const cluster::Link l = c.path_link(2, 0, &path);
  EXPECT_DOUBLE_EQ(l.bandwidth_gbps, 2);
  EXPECT_DOUBLE_EQ(l.latency_s, 4e-3);
  EXPECT_EQ(path, "x-y-z");
  EXPECT_DOUBLE_EQ(c.path_link(0, 1).latency_s, 1e-3);
}

TEST(UniformPlan, MoreNodesThanLayersIsInfeasible) {
  auto c = test_cluster();
  model::GptConfig g = model::gpt_preset("gpt-tiny").value();
  g.num_blocks = 1;
  g.granularity = 1;
  auto m = model::build_gpt(g);  // 3 layers, 3 nodes: fits exactly
  AnalyticCosts src(*m, CostConfig{});
  EXPECT_TRUE(planner::plan_uniform(StageCosts::build(c, src, 4, 4, CostConfig{}), {}).ok());
  c.subclusters[1].nodes = 3;
  auto p = planner::plan_uniform(StageCosts::build(c, src, 4, 4, CostConfig{}), {});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInfeasible);
}

}  // namespace
}  // namespace harp::cost
