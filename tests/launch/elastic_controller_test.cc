// The elastic controller with a fake launcher, a fake planner and a fake clock: a lost
// rank, a stalled rank, a re-admission, a planner refusal and a machine that never
// reports, each without a process or a sleep. The fake launcher writes what rank 0's
// MetricsLog would (launch/progress.h) and answers as launch() does.
#include "harp/launch/elastic.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "harp/common/document.h"
#include "harp/common/exit_code.h"
#include "harp/launch/progress.h"
#include "harp/launch/worker_env.h"
#include "harp/plan/closed_form.h"
#include "harp/plan/plan_io.h"
#include "testutil/temp_dir.h"

namespace harp::launch {
namespace {

class FakeClock : public Clock {
 public:
  double now_s() override { return t_; }
  double unix_s() override { return 1.7e9 + t_; }
  void sleep_s(double seconds) override {
    t_ += seconds;
    ++sleeps;
  }
  void advance(double seconds) { t_ += seconds; }
  int sleeps = 0;

 private:
  double t_ = 100.0;
};

// One device per node, `n` nodes: losing a device drops a node.
cluster::Cluster cpus(int n) {
  cluster::Cluster c;
  c.name = "cpus";
  cluster::DeviceType d;
  d.name = "cpu";
  c.devices["cpu"] = d;
  cluster::Subcluster s;
  s.name = "pool";
  s.device = "cpu";
  s.nodes = n;
  s.intra_node = s.inter_node = {10.0, 1e-5};
  c.subclusters.push_back(s);
  return c;
}

// A plan of one stage per device, so rank r runs device r.
StatusOr<PlanAttempt> one_stage_per_device(const cluster::Cluster& c, const ComputeDrift&) {
  PlanAttempt a;
  a.feasible = true;
  for (int d = 0; d < c.num_devices(); ++d) {
    plan::Stage st;
    st.devices = {d};
    a.plan.stages.push_back(st);
  }
  a.plan.predicted.iteration_s = 0.5;
  return a;
}

// Rank 0's records and the checkpoint marker, as a worker run writes them.
struct RunFolder {
  std::string out;
  Clock* clock;
  void step(int s) { write({{"step", s}, {"loss", 1.0}}); }
  void timed_step(int s, double seconds, Json extra = Json::object()) {
    extra.update({{"step", s}, {"loss", 1.0}, {"iteration_s", seconds}});
    write(extra);
  }
  void drift(int after_steps, int stage, std::vector<double> stage_ratios) {
    write({{kProgressDriftKey, after_steps},
           {"stage", stage},
           {"ratio", stage_ratios.at(static_cast<size_t>(stage))},
           {"stage_ratios", stage_ratios}});
  }
  // A link's drift with every stage's and link's level and baseline.
  void link_drift(int after_steps, int link, std::vector<double> stage_s, std::vector<double> link_measured_s,
                  std::vector<double> link_baseline_s) {
    std::vector<double> ratios;
    for (size_t l = 0; l < link_measured_s.size(); ++l) ratios.push_back(link_measured_s[l] / link_baseline_s[l]);
    write({{kProgressDriftKey, after_steps},
           {"stage", -1},
           {"link", link},
           {"ratio", ratios.at(static_cast<size_t>(link))},
           {"stage_ratios", std::vector<double>(stage_s.size(), 1.0)},
           {"stage_measured_s", stage_s},
           {"stage_baseline_s", stage_s},
           {"link_ratios", ratios},
           {"link_measured_s", link_measured_s},
           {"link_baseline_s", link_baseline_s}});
  }
  void resumed_step(int s) { write({{"step", s}, {"loss", 1.0}, {kProgressResumedKey, s}}); }
  void stopping_step(int s) { write({{"step", s - 1}, {"loss", 1.0}, {kProgressStoppedKey, s}}); }
  void checkpoint(int s) {
    std::filesystem::create_directories(out + "/checkpoints");
    std::ofstream(out + "/checkpoints/latest") << s << "\n";
  }
  void write(Json record) {
    record[kProgressWallKey] = clock->unix_s();
    std::ofstream(out + "/metrics.jsonl", std::ios::app) << record.dump() << "\n";
  }
};

// Each call plays the next scripted attempt: it sees the options and the folder and
// returns launch()'s answer. Starting the workers takes 10 ms of the clock, their exit
// another 10.
class FakeLauncher : public Launcher {
 public:
  explicit FakeLauncher(FakeClock& clock) : clock_(clock) {}
  using Attempt = std::function<LaunchResult(const LaunchOptions&)>;
  std::vector<Attempt> script;
  std::vector<LaunchOptions> seen;
  StatusOr<LaunchResult> run(const LaunchOptions& options, std::ostream& out) override {
    clock_.advance(0.01);
    seen.push_back(options);
    if (seen.size() > script.size()) return failed_precondition("no attempt scripted");
    out << "[rank 0] a worker's line\n";
    LaunchResult r = script[seen.size() - 1](options);
    clock_.advance(0.01);  // the workers exit
    return r;
  }

 private:
  FakeClock& clock_;
};

LaunchResult all_exited() {
  LaunchResult r;
  r.summary = "all workers exited 0";
  return r;
}

LaunchResult lost(std::vector<int> ranks, int code) {
  LaunchResult r;
  r.exit_code = code;
  r.failed_rank = ranks.empty() ? -1 : ranks.front();
  r.lost_ranks = std::move(ranks);
  r.stop_s = 1.5;
  r.summary = "rank lost";
  return r;
}

std::vector<Json> recoveries(const std::string& out) {
  std::vector<Json> rows;
  std::ifstream in(out + "/elastic/recoveries.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(Json::parse(line));
  return rows;
}

// What a worker launched with `vars` reads.
WorkerEnv env_of(const std::map<std::string, std::string>& vars) {
  return WorkerEnv::from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }).value();
}

std::string value_after(const std::vector<std::string>& words, const std::string& flag) {
  for (size_t i = 0; i + 1 < words.size(); ++i)
    if (words[i] == flag) return words[i + 1];
  return "";
}

struct Fixture {
  testing::TempDir dir;
  FakeClock clock;
  FakeLauncher launcher{clock};
  RunFolder folder{dir.path(), &clock};
  std::ostringstream out, err;
  ElasticOptions options() const {
    ElasticOptions o;
    o.job_file = dir.file("job.yaml");
    o.out_dir = dir.path();
    o.command = {"harp", "train"};
    return o;
  }
};

TEST(ElasticController, AKilledRankIsDroppedAndTheRunResumesOnANewPlan) {
  Fixture f;
  f.launcher.script = {
      [&](const LaunchOptions& o) {
        EXPECT_EQ(o.nproc, 4);
        for (int s = 0; s < 6; ++s) f.folder.step(s);
        f.folder.checkpoint(4);
        f.clock.advance(2.0);
        return lost({2}, 137);  // rank 2 killed by SIGKILL
      },
      [&](const LaunchOptions& o) {
        EXPECT_EQ(o.nproc, 3);
        f.clock.advance(0.75);  // the restart: rendezvous, resume
        f.folder.resumed_step(4);
        f.folder.step(5);
        return all_exited();
      }};
  ElasticController c(f.options(), cpus(4), one_stage_per_device, nullptr, f.launcher, f.clock);
  ASSERT_EQ(c.run(f.out, f.err), kExitOk) << f.err.str();
  ASSERT_EQ(f.launcher.seen.size(), 2u);
  const auto& second = f.launcher.seen[1].command;
  EXPECT_EQ(value_after(second, "--plan"), f.dir.file("elastic/plan_1.json"));
  EXPECT_EQ(second.back(), "--resume");
  EXPECT_EQ(value_after(second, "--job"), f.dir.file("job.yaml"));
  const auto rows = recoveries(f.dir.path());
  ASSERT_EQ(rows.size(), 1u) << f.err.str();
  EXPECT_EQ(rows[0]["lost_ranks"], Json::array({2}));
  EXPECT_EQ(rows[0]["lost_devices"], Json::array({2}));
  EXPECT_EQ(rows[0]["failed_at_step"], 6);
  EXPECT_EQ(rows[0]["resumed_step"], 4);
  EXPECT_EQ(rows[0]["steps_lost"], 2);
  EXPECT_EQ(rows[0]["devices_left"], 3);
  EXPECT_DOUBLE_EQ(rows[0]["stop_s"].get<double>(), 1.5);
  EXPECT_NEAR(rows[0]["restart_s"].get<double>(), 0.76, 1e-6);  // from the relaunch to its first step
  EXPECT_NE(f.err.str().find("lost rank(s) [2] (device 2) after step 6; re-planning over 3 devices"),
            std::string::npos)
      << f.err.str();
  EXPECT_NE(f.out.str().find("[rank 0] a worker's line"), std::string::npos);
  EXPECT_EQ(f.clock.sleeps, 0);
}

TEST(ElasticController, AStalledRankIsLostLikeAKilledOne) {
  // launch() reports a rank that ignored SIGTERM for the grace period among lost_ranks
  // (exit 143 for the others); the controller drops it the same way.
  Fixture f;
  f.launcher.script = {[&](const LaunchOptions&) {
                         f.folder.step(0);
                         LaunchResult r = lost({1}, 143);
                         r.summary = "rank 1 ignored SIGTERM: killed";
                         return r;
                       },
                       [&](const LaunchOptions& o) {
                         EXPECT_EQ(o.nproc, 2);
                         EXPECT_EQ(o.grace_s, 0.25);
                         return all_exited();
                       }};
  ElasticOptions o = f.options();
  o.grace_s = 0.25;
  ElasticController c(o, cpus(3), one_stage_per_device, nullptr, f.launcher, f.clock);
  ASSERT_EQ(c.run(f.out, f.err), kExitOk) << f.err.str();
  const auto rows = recoveries(f.dir.path());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["lost_devices"], Json::array({1}));
  EXPECT_TRUE(rows[0]["restart_s"].is_null());  // the second attempt recorded no step
  EXPECT_NE(f.err.str().find("first step after the restart never"), std::string::npos) << f.err.str();
}

TEST(ElasticController, AStopRequestReadmitsTheDevicesTheClusterFileListsAgain) {
  Fixture f;
  int reads = 0;
  auto reread = [&]() -> StatusOr<cluster::Cluster> {
    ++reads;
    return cpus(4);
  };
  f.launcher.script = {[&](const LaunchOptions& o) {
                         EXPECT_EQ(o.nproc, 2);
                         EXPECT_TRUE(env_of(o.env).emulate);  // --emulate reaches every worker
                         f.folder.step(0);
                         f.folder.stopping_step(2);
                         f.folder.checkpoint(2);
                         LaunchResult r = all_exited();
                         r.forwarded_s = 0.4;
                         return r;
                       },
                       [&](const LaunchOptions& o) {
                         EXPECT_EQ(o.nproc, 4);
                         f.folder.resumed_step(2);
                         return all_exited();
                       }};
  ElasticOptions o = f.options();
  o.emulate = true;
  ElasticController c(o, cpus(2), one_stage_per_device, reread, f.launcher, f.clock);
  ASSERT_EQ(c.run(f.out, f.err), kExitOk) << f.err.str();
  EXPECT_EQ(reads, 1);
  const auto rows = recoveries(f.dir.path());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["readmitted"], 2);
  EXPECT_EQ(rows[0]["stopped_at_step"], 2);
  EXPECT_EQ(rows[0]["steps_lost"], 0);
  EXPECT_DOUBLE_EQ(rows[0]["stop_s"].get<double>(), 0.4);
  EXPECT_NE(f.err.str().find("re-planning over the 4 devices of the job's cluster, read again (2 before)"),
            std::string::npos)
      << f.err.str();
}

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

TEST(ElasticController, APlannerRefusalStopsWithItsReasonAndExitCode3) {
  Fixture f;
  auto planner = [](const cluster::Cluster& c, const ComputeDrift&) -> StatusOr<PlanAttempt> {
    if (c.num_devices() < 2) return PlanAttempt{false, "the model needs 2 devices' memory", {}};
    return one_stage_per_device(c, {});
  };
  f.launcher.script = {[&](const LaunchOptions&) { return lost({0}, 137); }};
  ElasticController c(f.options(), cpus(2), planner, nullptr, f.launcher, f.clock);
  EXPECT_EQ(c.run(f.out, f.err), kExitInfeasible);
  EXPECT_EQ(f.launcher.seen.size(), 1u);
  EXPECT_NE(f.err.str().find("no plan fits the 1 devices left: the model needs 2 devices' memory"),
            std::string::npos)
      << f.err.str();
}

TEST(ElasticController, RestartsStopAtMaxRestartsAndAWorkersOwnFailureIsNotRestarted) {
  Fixture f;
  f.launcher.script = {[&](const LaunchOptions&) { return lost({0}, 137); },
                       [&](const LaunchOptions&) { return lost({0}, 137); }};
  ElasticOptions o = f.options();
  o.max_restarts = 1;
  ElasticController c(o, cpus(3), one_stage_per_device, nullptr, f.launcher, f.clock);
  EXPECT_EQ(c.run(f.out, f.err), 137);
  EXPECT_NE(f.err.str().find("1 restarts spent (--max-restarts); stopping"), std::string::npos) << f.err.str();

  Fixture g;
  g.launcher.script = {[&](const LaunchOptions&) {
    LaunchResult r;
    r.exit_code = 1;  // exited with an error: nothing was lost
    return r;
  }};
  ElasticController d(g.options(), cpus(2), one_stage_per_device, nullptr, g.launcher, g.clock);
  EXPECT_EQ(d.run(g.out, g.err), 1);
  EXPECT_NE(g.err.str().find("no rank was lost"), std::string::npos) << g.err.str();
}

TEST(ElasticController, AMachineThatNeverReportsIsLostWholeAfterTheWait) {
  // Node 0 of two (two devices each) loses nothing itself; node 1's launcher never
  // writes its report, so after report_wait_s (fake time, no real sleep) its devices
  // go and node 0 re-plans over its own two.
  Fixture f;
  f.launcher.script = {[&](const LaunchOptions& o) {
                         EXPECT_EQ(o.ranks, (std::vector<int>{0, 1}));
                         EXPECT_EQ(o.world_size, 4);
                         EXPECT_EQ(o.store_host, 0);
                         f.folder.step(0);
                         return lost({}, 143);  // stopped because a rank elsewhere failed
                       },
                       [&](const LaunchOptions& o) {
                         EXPECT_EQ(o.ranks, (std::vector<int>{0, 1}));
                         EXPECT_EQ(o.world_size, 2);
                         EXPECT_EQ(o.master_port, 29501);  // a fresh store per attempt
                         return all_exited();
                       }};
  ElasticOptions o = f.options();
  o.nnodes = 2;
  o.report_wait_s = 60;
  const double before = f.clock.now_s();
  ElasticController c(o, cpus(4), one_stage_per_device, nullptr, f.launcher, f.clock);
  ASSERT_EQ(c.run(f.out, f.err), kExitOk) << f.err.str();
  EXPECT_GE(f.clock.now_s() - before, 60.0);
  EXPECT_NE(f.err.str().find("node 1 did not report within 60 s: its devices are lost"), std::string::npos)
      << f.err.str();
  const auto rows = recoveries(f.dir.path());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["lost_devices"], Json::array({3, 2}));
}

TEST(ElasticController, AWorkerCommandThatSetsThePlanIsRefused) {
  Fixture f;
  ElasticOptions o = f.options();
  o.command = {"harp", "train", "--plan", "p.json"};
  ElasticController c(o, cpus(2), one_stage_per_device, nullptr, f.launcher, f.clock);
  EXPECT_EQ(c.run(f.out, f.err), kExitUsage);
  EXPECT_TRUE(f.launcher.seen.empty());
}

TEST(Progress, RecordsBeforeTheAttemptAndLinesThatAreNotRecordsAreSkipped) {
  testing::TempDir dir;
  std::ofstream(dir.file("metrics.jsonl")) << R"({"step": 0, "wall_unix_s": 10}
{"step": 1, "wall_unix_s": 20}
not json
{"eval_after_steps": 2, "val_loss": 3.0}
{"step": 1, "wall_unix_s": 31, "resumed_from_step": 1}
{"step": 2, "wall_unix_s": 32, "stopped_at_step": 3}
)";
  const RunProgress p = read_progress(dir.path(), 25);
  EXPECT_EQ(p.steps_done, 3);
  EXPECT_EQ(p.resumed_step, 1);
  EXPECT_EQ(p.stopped_step, 3);
  EXPECT_EQ(p.first_step_unix, 31);
  EXPECT_EQ(read_progress(dir.file("none"), 0).steps_done, -1);
}

TEST(WorkerEnv, WhatALauncherWritesAWorkerReadsBack) {
  WorkerEnv w;
  w.rank = 3;
  w.world_size = 5;
  w.local_rank = 1;
  w.local_world_size = 2;
  w.group_rank = 1;
  w.master_addr = "10.0.0.7";
  w.master_port = "29512";
  w.store_file = "/tmp/x/store";
  w.store_server = "0";
  w.clock_origin_ns = 123456789;
  w.emulate = true;
  w.testbed = "hx";
  w.gloo_addr = "10.77.0.2";
  w.rendezvous_secret = "0123456789abcdef";
  const WorkerEnv r = env_of(w.to_env());
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 5);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.local_world_size, 2);
  EXPECT_EQ(r.group_rank, 1);
  EXPECT_EQ(r.master_addr, "10.0.0.7");
  EXPECT_EQ(r.master_port, "29512");
  EXPECT_EQ(r.store_file, w.store_file);
  EXPECT_EQ(r.store_server, "0");
  EXPECT_EQ(r.clock_origin_ns, 123456789);
  EXPECT_TRUE(r.emulate);
  EXPECT_EQ(r.testbed, "hx");
  EXPECT_EQ(r.gloo_addr, "10.77.0.2");
  EXPECT_EQ(r.rendezvous_secret, w.rendezvous_secret);
  // Unset HARP variables are not written (a worker inherits the launcher's), torchrun's
  // always are; an unset environment reads as the defaults.
  EXPECT_EQ(WorkerEnv{}.to_env().size(), 7u);
  EXPECT_TRUE(WorkerEnv{}.harp_env().empty());
  const WorkerEnv none = WorkerEnv::from([](const char*) -> const char* { return nullptr; }).value();
  EXPECT_EQ(none.world_size, 1);
  EXPECT_EQ(none.master_addr, "127.0.0.1");
  EXPECT_FALSE(none.emulate);
  // A value that is not the whole number it should be is refused, naming the variable.
  const auto bad_clock = WorkerEnv::from([](const char* n) -> const char* {
    return std::string(n) == "HARP_CLOCK_ORIGIN_NS" ? "12x" : nullptr;
  });
  ASSERT_FALSE(bad_clock.ok());
  EXPECT_NE(bad_clock.status().message().find("HARP_CLOCK_ORIGIN_NS"), std::string::npos);
}

}  // namespace
}  // namespace harp::launch
