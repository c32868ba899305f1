// The elastic controller with a fake launcher, a fake planner and a fake clock
// (elastic_fixture.h): a lost rank, a stalled rank, a re-admission, a planner refusal and a
// machine that never reports, each without a process or a sleep; re-planning on drift is in
// elastic_replan_test.cc. The fake launcher writes what rank 0's
// MetricsLog would (launch/progress.h) and answers as launch() does.
#include <gtest/gtest.h>

#include "elastic_fixture.h"
#include "harp/launch/elastic_nodes.h"
#include "testutil/status.h"

namespace harp::launch {
namespace {

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
  w.group_world_size = 2;
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
  EXPECT_EQ(r.group_world_size, 2);
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
  EXPECT_EQ(WorkerEnv{}.to_env().size(), 8u);
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

namespace harp::launch {
namespace {

// Machines across `--nnodes`: the cluster file's nodes when there are as many (of any
// size: 2 + 1 + 1 here), else an equal share of the devices in order, else refused.
TEST(MachineDevices, TheClusterFilesNodesOfAnySizeOrAnEqualShare) {
  cluster::Cluster c = cpus(4);
  c.subclusters[0].nodes = 1;
  c.subclusters[0].devices_per_node = 2;
  cluster::Subcluster second = c.subclusters[0];
  second.name = "second";
  second.nodes = 2;
  second.devices_per_node = 1;
  c.subclusters.push_back(second);
  ASSERT_EQ(c.num_devices(), 4);
  ASSERT_EQ(c.num_nodes(), 3);
  EXPECT_EQ(c.node_of_device(1), 0);
  EXPECT_EQ(c.node_of_device(3), 2);
  auto by_nodes = MachineDevices::split(c, 3);
  HARP_ASSERT_OK(by_nodes.status());
  EXPECT_EQ(by_nodes->of(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(by_nodes->of(1), (std::vector<int>{2}));
  EXPECT_EQ(by_nodes->of(2), (std::vector<int>{3}));
  auto equal = MachineDevices::split(c, 4);
  HARP_ASSERT_OK(equal.status());
  EXPECT_EQ(equal->of(3), (std::vector<int>{3}));
  auto refused = MachineDevices::split(c, 5);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("give --nnodes 3 (one launcher per node of the cluster file"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace harp::launch
