// Re-planning on drift with the elastic controller's fakes (elastic_fixture.h): a
// subcluster that drifts slower and recovers, a link that drifts and is routed around, a
// probe that sees it recover, and a plan that does not pay for its restart, each with its
// figures by hand.
#include <gtest/gtest.h>

#include "elastic_fixture.h"

namespace harp::launch {
namespace {

// Re-planning on drift (records without per-stage levels: the ratios scale the plan's
// stage times). Two subclusters of one device each ("a", "b"), a model of four
// layers of 1 s per microbatch times the subcluster's drift, B = 4: the planner cuts where
// the slower stage is fastest, and the closed form is sum t + 3 max t (no links). With
// no drift, 2 + 2 layers: 10 s. With b 3x slower: 2 + 2 gives 2 s and 6 s (26 s); 3 + 1
// gives 3 s and 3 s (15 s), the plan adopted; when b recovers, 3 + 1 predicts 13 s
// against 2 + 2's 10 s.
cluster::Cluster two_pools() {
  cluster::Cluster c = cpus(1);
  c.subclusters[0].name = "a";
  cluster::Subcluster b = c.subclusters[0];
  b.name = "b";
  c.subclusters.push_back(b);
  c.links.push_back({"a", "b", {10.0, 1e-5}});
  return c;
}

StatusOr<PlanAttempt> best_cut(const cluster::Cluster&, const ComputeDrift& drift) {
  const double fa = drift.count("a") ? drift.at("a") : 1.0, fb = drift.count("b") ? drift.at("b") : 1.0;
  int best = 1;
  for (int k = 2; k <= 3; ++k)
    if (std::max(k * fa, (4 - k) * fb) < std::max(best * fa, (4 - best) * fb)) best = k;
  PlanAttempt a;
  a.feasible = true;
  a.plan.microbatches = 4;
  for (int s = 0; s < 2; ++s) {
    plan::Stage st;
    st.subcluster = s;
    st.subcluster_name = s == 0 ? "a" : "b";
    st.devices = {s};
    st.first_layer = s == 0 ? 0 : best;
    st.last_layer = s == 0 ? best : 4;
    const double t = (st.last_layer - st.first_layer) * (s == 0 ? fa : fb);
    st.fwd_s = t / 3;
    st.bwd_s = 2 * t / 3;
    a.plan.stages.push_back(st);
  }
  a.plan.predicted = plan::closed_form(a.plan);
  return a;
}

ElasticOptions replanning(const Fixture& f, double min_gain) {
  ElasticOptions o = f.options();
  o.replan_min_gain = min_gain;
  o.drift_threshold = 1.5;
  o.drift_window = 5;
  o.steps = 100;
  o.checkpoint_every = 10;
  return o;
}

int cut_of(const std::string& plan_file) { return plan::load_plan(plan_file).value().stages[0].last_layer; }

TEST(ElasticController, ADriftAdoptsAFasterPlanAtTheNextCheckpointAndMovesBackWhenItEnds) {
  Fixture f;
  f.launcher.script = {
      [&](const LaunchOptions& o) {
        EXPECT_EQ(cut_of(value_after(o.command, "--plan")), 2);
        for (int s = 0; s < 10; ++s) f.folder.timed_step(s, 10.0);
        EXPECT_FALSE(o.stop_when());  // no drift yet
        f.clock.advance(1.0);
        for (int s = 10; s < 15; ++s) f.folder.timed_step(s, 26.0);
        f.folder.drift(15, 1, {1.0, 3.0});
        EXPECT_TRUE(o.stop_when());  // adopted: the workers stop at their next checkpoint
        f.folder.timed_step(19, 26.0, {{kProgressStoppedKey, 20}});
        f.folder.checkpoint(20);
        LaunchResult r = all_exited();
        r.forwarded_s = 2.0;
        return r;
      },
      [&](const LaunchOptions& o) {
        EXPECT_EQ(cut_of(value_after(o.command, "--plan")), 3);  // the plan for b at 3x
        EXPECT_NE(std::find(o.command.begin(), o.command.end(), "--resume"), o.command.end());
        f.folder.timed_step(20, 40.0, {{kProgressResumedKey, 20}});
        for (int s = 21; s < 30; ++s) f.folder.timed_step(s, 15.0);
        f.clock.advance(1.0);
        for (int s = 30; s < 35; ++s) f.folder.timed_step(s, 13.0);
        f.folder.drift(35, 1, {1.0, 1 / 3.0});  // b recovers
        EXPECT_TRUE(o.stop_when());
        f.folder.timed_step(39, 13.0, {{kProgressStoppedKey, 40}});
        f.folder.checkpoint(40);
        return all_exited();
      },
      [&](const LaunchOptions& o) {
        EXPECT_EQ(cut_of(value_after(o.command, "--plan")), 2);  // back
        f.folder.timed_step(40, 30.0, {{kProgressResumedKey, 40}});
        for (int s = 41; s < 100; ++s) f.folder.timed_step(s, 10.0);
        return all_exited();
      }};
  ElasticController c(replanning(f, 0.1), two_pools(), best_cut, nullptr, f.launcher, f.clock);
  ASSERT_EQ(c.run(f.out, f.err), kExitOk) << f.err.str();
  ASSERT_EQ(f.launcher.seen.size(), 3u) << f.err.str();
  const auto rows = recoveries(f.dir.path());
  ASSERT_EQ(rows.size(), 2u);
  // The first: b at 3x; the running plan predicted 26 s there (measured 26), the new one 15 s.
  EXPECT_TRUE(rows[0]["adopted"].get<bool>());
  EXPECT_NEAR(rows[0]["compute_drift"]["b"].get<double>(), 3.0, 1e-12);
  EXPECT_NEAR(rows[0]["compute_drift"]["a"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(rows[0]["model_error_s"].get<double>(), 0.0, 1e-12);  // 10 s measured and predicted before
  EXPECT_NEAR(rows[0]["predicted_old_s"].get<double>(), 26.0, 1e-9);
  EXPECT_NEAR(rows[0]["predicted_new_s"].get<double>(), 15.0, 1e-9);
  EXPECT_NEAR(rows[0]["measured_old_s"].get<double>(), 26.0, 1e-12);
  EXPECT_EQ(rows[0]["steps_left"], 80);
  EXPECT_NEAR(rows[0]["predicted_gain"].get<double>(), 1 - (80 * 15.0 + rows[0]["restart_s"].get<double>()) / (80 * 26.0), 1e-9);
  EXPECT_EQ(rows[0]["stopped_at_step"], 20);
  EXPECT_EQ(rows[0]["resumed_step"], 20);
  EXPECT_EQ(rows[0]["steps_lost"], 0);
  EXPECT_NEAR(rows[0]["measured_new_s"].get<double>(), 15.0, 1e-12);  // the steps after the first
  EXPECT_NEAR(rows[0]["measured_gain"].get<double>(), 1 - 15.0 / 26.0, 1e-12);
  // The second: b recovered, its factor back to 1; 3 + 1 predicts 13 s, 2 + 2 10 s.
  EXPECT_TRUE(rows[1]["adopted"].get<bool>());
  EXPECT_NEAR(rows[1]["compute_drift"]["b"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(rows[1]["predicted_old_s"].get<double>(), 13.0, 1e-9);
  EXPECT_NEAR(rows[1]["predicted_new_s"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(rows[1]["measured_new_s"].get<double>(), 10.0, 1e-12);
  EXPECT_NE(f.err.str().find("adopting it at the checkpoint of step 20"), std::string::npos) << f.err.str();
}

// A link's drift. Three subclusters of one device each, every pair linked at 1 Gbit/s,
// where a message takes 0.5 s; a stage of 1 s per microbatch on each; B = 4. The planner
// orders the subclusters so that the slowest link it crosses is fastest (a, b, c first
// on ties): T = sum t + 2 sum c + 3 max(t, c) = 3 + 2 + 3 = 8 s. The link a-b 4x slower
// (2 s a message): a, b, c runs 3 + 5 + 6 = 14 s; a, c, b avoids it: 8 s, adopted.
cluster::Cluster three_linked_pools() {
  cluster::Cluster c = cpus(1);
  c.subclusters[0].name = "a";
  for (const char* name : {"b", "c"}) {
    cluster::Subcluster s = c.subclusters[0];
    s.name = name;
    c.subclusters.push_back(s);
  }
  c.links = {{"a", "b", {1.0, 0.0}}, {"b", "c", {1.0, 0.0}}, {"a", "c", {1.0, 0.0}}};
  return c;
}

// The fastest of the chains a-b-c, a-c-b, b-a-c by the closed form (the first on ties).
StatusOr<PlanAttempt> best_order(const cluster::Cluster& c, const ComputeDrift&) {
  auto message_s = [&](int x, int y) { return 0.5 / c.path_link(x, y).bandwidth_gbps; };
  PlanAttempt best;
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {0, 2, 1}, {1, 0, 2}}) {
    PlanAttempt a;
    a.feasible = true;
    a.plan.microbatches = 4;
    for (int s = 0; s < 3; ++s) {
      plan::Stage st;
      st.subcluster = order[s];
      st.subcluster_name = c.subclusters[order[s]].name;
      st.devices = {order[s]};
      st.first_layer = s;
      st.last_layer = s + 1;
      st.fwd_s = 1.0 / 3;
      st.bwd_s = 2.0 / 3;
      st.crosses_nodes = s < 2;
      if (s < 2) st.comm_s = message_s(order[s], order[s + 1]);
      a.plan.stages.push_back(st);
    }
    a.plan.predicted = plan::closed_form(a.plan);
    if (!best.feasible || a.plan.predicted.iteration_s < best.plan.predicted.iteration_s) best = a;
  }
  return best;
}

std::vector<int> order_of(const LaunchOptions& o) {
  std::vector<int> devices;
  const auto plan = plan::load_plan(value_after(o.command, "--plan"));
  EXPECT_TRUE(plan.ok());
  if (plan.ok())
    for (const auto& st : plan->stages) devices.push_back(st.devices[0]);
  return devices;
}

TEST(ElasticController, ASlowedLinkAdoptsAPlanThatAvoidsItAtTheNextCheckpoint) {
  Fixture f;
  f.launcher.script = {
      [&](const LaunchOptions& o) {
        EXPECT_EQ(order_of(o), (std::vector<int>{0, 1, 2}));
        for (int s = 0; s < 10; ++s) f.folder.timed_step(s, 8.0);
        f.clock.advance(1.0);
        for (int s = 10; s < 15; ++s) f.folder.timed_step(s, 14.0);
        f.folder.link_drift(15, 0, {1.0, 1.0, 1.0}, {2.0, 0.5}, {0.5, 0.5});
        EXPECT_TRUE(o.stop_when());
        f.folder.timed_step(19, 14.0, {{kProgressStoppedKey, 20}});
        f.folder.checkpoint(20);
        return all_exited();
      },
      [&](const LaunchOptions& o) {
        EXPECT_EQ(order_of(o), (std::vector<int>{0, 2, 1}));  // around the slow link
        f.folder.timed_step(20, 20.0, {{kProgressResumedKey, 20}});
        for (int s = 21; s < 100; ++s) f.folder.timed_step(s, 8.0);
        return all_exited();
      }};
  ElasticController c(replanning(f, 0.1), three_linked_pools(), best_order, nullptr, f.launcher, f.clock);
  ASSERT_EQ(c.run(f.out, f.err), kExitOk) << f.err.str();
  ASSERT_EQ(f.launcher.seen.size(), 2u) << f.err.str();
  const auto rows = recoveries(f.dir.path());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0]["adopted"].get<bool>());
  EXPECT_EQ(rows[0]["link"], 0);
  EXPECT_NEAR(rows[0]["link_drift"]["a-b"].get<double>(), 4.0, 1e-12);
  EXPECT_NEAR(rows[0]["link_drift"]["b-c"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(rows[0]["predicted_old_s"].get<double>(), 14.0, 1e-9);
  EXPECT_NEAR(rows[0]["predicted_new_s"].get<double>(), 8.0, 1e-9);
  EXPECT_NEAR(rows[0]["model_error_s"].get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(rows[0]["measured_new_s"].get<double>(), 8.0, 1e-12);
  EXPECT_NE(f.err.str().find("the links take a-b x4.00"), std::string::npos) << f.err.str();
}

// The link a plan routes around recovers, and a probe of it (the workers' link_probes on a
// step line) moves the plan back. a-b at 2 Gbit/s (0.25 s a message), b-c and a-c at 1
// (0.5 s): a, b, c runs 3 + 1.5 + 3 = 7.5 s, a, c, b 8 s. a-b 8x slower (2 s): a, b, c runs
// 14 s, a, c, b is adopted; then a probe of a-b reads 0.25 s again: its factor goes back to
// 1, and a, b, c, predicted 7.5 s against 8 s measured over the 60 steps left, is adopted
// at the next checkpoint. The workers are told to probe (--link-probe-every).
TEST(ElasticController, AProbedLinkThatRecoversMovesThePlanBack) {
  Fixture f;
  const Json probe = Json::array({{{"a", "a"}, {"b", "b"}, {"bytes", 0.25 * 2e9 / 8}, {"transit_s", 0.25}}});
  f.launcher.script = {
      [&](const LaunchOptions& o) {
        EXPECT_EQ(order_of(o), (std::vector<int>{0, 1, 2}));
        EXPECT_EQ(value_after(o.command, "--link-probe-every"), "10");
        for (int s = 0; s < 10; ++s) f.folder.timed_step(s, 7.5);
        for (int s = 10; s < 15; ++s) f.folder.timed_step(s, 14.0);
        f.folder.link_drift(15, 0, {1.0, 1.0, 1.0}, {2.0, 0.5}, {0.25, 0.5});
        EXPECT_TRUE(o.stop_when());
        f.folder.timed_step(19, 14.0, {{kProgressStoppedKey, 20}});
        f.folder.checkpoint(20);
        return all_exited();
      },
      [&](const LaunchOptions& o) {
        EXPECT_EQ(order_of(o), (std::vector<int>{0, 2, 1}));
        f.folder.timed_step(20, 8.0, {{kProgressResumedKey, 20}});
        for (int s = 21; s < 30; ++s) f.folder.timed_step(s, 8.0, s == 29 ? Json{{"link_probes", probe}} : Json::object());
        f.clock.advance(1.0);
        EXPECT_TRUE(o.stop_when());
        f.folder.timed_step(39, 8.0, {{kProgressStoppedKey, 40}});
        f.folder.checkpoint(40);
        return all_exited();
      },
      [&](const LaunchOptions& o) {
        EXPECT_EQ(order_of(o), (std::vector<int>{0, 1, 2}));  // back
        f.folder.timed_step(40, 7.5, {{kProgressResumedKey, 40}});
        for (int s = 41; s < 100; ++s) f.folder.timed_step(s, 7.5);
        return all_exited();
      }};
  cluster::Cluster c = three_linked_pools();
  c.links[0].link.bandwidth_gbps = 2.0;  // a-b
  ElasticOptions o = replanning(f, 0.05);
  o.link_probe_every = 10;
  ElasticController controller(o, c, best_order, nullptr, f.launcher, f.clock);
  ASSERT_EQ(controller.run(f.out, f.err), kExitOk) << f.err.str();
  ASSERT_EQ(f.launcher.seen.size(), 3u) << f.err.str();
  const auto rows = recoveries(f.dir.path());
  ASSERT_EQ(rows.size(), 2u) << f.err.str();
  EXPECT_NEAR(rows[0]["link_drift"]["a-b"].get<double>(), 8.0, 1e-9);
  EXPECT_EQ(rows[1]["link_probe"], "a-b");
  EXPECT_EQ(rows[1]["probe_after_steps"], 30);
  EXPECT_NEAR(rows[1]["link_drift"]["a-b"].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(rows[1]["predicted_old_s"].get<double>(), 8.0, 1e-9);
  EXPECT_NEAR(rows[1]["predicted_new_s"].get<double>(), 7.5, 1e-9);
  EXPECT_TRUE(rows[1]["adopted"].get<bool>());
  EXPECT_NEAR(rows[1]["measured_new_s"].get<double>(), 7.5, 1e-12);
  EXPECT_NE(f.err.str().find("the link a-b, which the running plan does not cross, takes x1.00"), std::string::npos)
      << f.err.str();
}

TEST(ElasticController, DriftedClusterScalesTheDeclaredLinkOrAddsTheChainsScaled) {
  cluster::Cluster c = three_linked_pools();
  c.links.pop_back();  // a-c now goes through b
  const cluster::Cluster d = drifted_cluster(c, {{{"a", "b"}, 4.0}, {{"a", "c"}, 2.0}, {{"gone", "a"}, 3.0}});
  EXPECT_DOUBLE_EQ(d.path_link(0, 1).bandwidth_gbps, 0.25);
  EXPECT_DOUBLE_EQ(d.path_link(1, 2).bandwidth_gbps, 1.0);
  ASSERT_TRUE(d.link_between(0, 2).has_value());
  EXPECT_DOUBLE_EQ(d.link_between(0, 2)->bandwidth_gbps, 0.5);  // the chain's 1 Gbit/s, halved
  EXPECT_EQ(d.links.size(), 3u);
}

TEST(ElasticController, ADriftWhosePlanDoesNotPayForItsRestartKeepsTheRunningPlan) {
  for (const auto& [min_gain, steps] : {std::pair{0.5, 100}, {0.1, 20}}) {
    // 42% < 50%; then 42% per step but no steps left after the stop at step 20.
    Fixture f;
    f.launcher.script = {[&, steps = steps](const LaunchOptions& o) {
      for (int s = 0; s < 10; ++s) f.folder.timed_step(s, 10.0);
      for (int s = 10; s < 15; ++s) f.folder.timed_step(s, 26.0);
      f.folder.drift(15, 1, {1.0, 3.0});
      EXPECT_FALSE(o.stop_when());
      for (int s = 15; s < steps; ++s) f.folder.timed_step(s, 26.0);
      return all_exited();
    }};
    ElasticOptions o = replanning(f, min_gain);
    o.steps = steps;
    ElasticController c(o, two_pools(), best_cut, nullptr, f.launcher, f.clock);
    ASSERT_EQ(c.run(f.out, f.err), kExitOk) << f.err.str();
    EXPECT_EQ(f.launcher.seen.size(), 1u);
    const auto rows = recoveries(f.dir.path());
    ASSERT_EQ(rows.size(), 1u) << min_gain;
    EXPECT_FALSE(rows[0]["adopted"].get<bool>());
    EXPECT_EQ(rows[0]["steps_left"], steps - 20);
    EXPECT_NE(f.err.str().find("keeping the running plan"), std::string::npos) << f.err.str();
  }
}

}  // namespace
}  // namespace harp::launch
