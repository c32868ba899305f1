// Elastic training (`harp launch --elastic`): one rank of a 4-rank run is killed from
// outside mid-run; the launcher drops its device, re-plans over the 3 left and resumes
// from the last checkpoint. The run finishes its steps; after the restart its losses
// equal those of a fresh 3-rank run started from the same checkpoint with the same new
// plan, and it lost no more steps than the checkpoint interval. SIGUSR1 re-admits the
// devices of the cluster file at the next checkpoint, the same way. A device that drifts
// slower has the launcher adopt a plan made for it at the next checkpoint, the same way.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "harp/common/document.h"
#include "harp/launch/worker_env.h"
#include "harp/plan/plan_io.h"
#include "process_util.h"

namespace harp {
namespace {

const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

// The launcher's worker whose environment has RANK=`rank`, or -1.
pid_t worker_of(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  for (pid_t pid; children >> pid;) {
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
    for (std::string var; std::getline(env, var, '\0');)
      if (var == "RANK=" + std::to_string(rank)) return pid;
  }
  return -1;
}

// N one-CPU nodes.
std::string cpu_cluster(int nodes) {
  return "version: 1\nname: cpu-nodes\nsubclusters:\n  - {name: cpus, device: cpu, nodes: " + std::to_string(nodes) +
         ", devices_per_node: 1,\n     intra_node: {bandwidth_gbps: 12, latency_us: 80}, inter_node: "
         "{bandwidth_gbps: 12, latency_us: 80}}\n";
}

// Two machines of `a` and `b` one-CPU devices (a node of 8 V100s beside one of 4 A100s,
// scaled down): the launchers of `--nnodes 2` host the cluster file's nodes.
std::string cpu_machines(int a, int b) {
  const std::string links = "intra_node: {bandwidth_gbps: 12, latency_us: 80}";
  return "version: 1\nname: cpu-machines\nsubclusters:\n  - {name: m0, device: cpu, nodes: 1, devices_per_node: " +
         std::to_string(a) + ", " + links +
         "}\n  - {name: m1, device: cpu, nodes: 1, devices_per_node: " + std::to_string(b) + ", " + links +
         "}\nlinks:\n  - {between: [m0, m1], bandwidth_gbps: 12, latency_ms: 0.08}\n";
}

// gpt-tiny on DIR/cluster.yaml, out DIR/run, a checkpoint every `every` steps.
std::string tiny_job(int steps, int every) {
  return "version: 1\ncluster: cluster.yaml\n"
         "model: {family: gpt, preset: gpt-tiny, granularity: 1}\ncost: {gradient_bytes_per_param_byte: 2}\n"
         "planner: {strategy: harp, microbatches: 4, microbatch_size: 4}\n"
         "training: {steps: " + std::to_string(steps) + ", lr: 1.0e-2, warmup_steps: 2, checkpoint_every: " +
         std::to_string(every) + ", out: run, timeout_s: 5}\n";
}

void expect_continues_as_a_fresh_run(const std::string& dir, int resumed, int nproc, int steps,
                                     std::chrono::steady_clock::time_point limit, int plan = 1) {
  harp::expect_continues_as_a_fresh_run(kHarp, dir, resumed, nproc, steps, limit, plan);
}

// Whether the run in OUT has logged `lines` steps and completed a checkpoint (`latest`).
// The checkpoints are asynchronous: on a loaded machine the first may complete some steps
// after its own, and a kill before it would (rightly) restart from scratch.
bool has_steps_and_a_checkpoint(const std::string& out, int lines, bool checkpoint = true) {
  return line_count(out + "/metrics.jsonl") >= lines &&
         (!checkpoint || std::filesystem::exists(out + "/checkpoints/latest"));
}

// Runs `harp launch --elastic` on DIR/job.yaml (out: DIR/run) and kills rank 1 once
// `lines` steps are in the metrics and (when `checkpoint`) a checkpoint is complete;
// returns the launcher's exit code and stderr.
std::pair<int, std::string> run_and_kill_rank_1(const std::string& dir, int lines,
                                                std::chrono::steady_clock::time_point limit, bool checkpoint = true) {
  const std::string out = dir + "/run";
  Child launcher = spawn_rank({kHarp, "launch", "--elastic", "--job", dir + "/job.yaml", "--grace-s", "1", "--",
                               kHarp, "train", "--out", out},
                              {"OMP_NUM_THREADS=1"}, dir + "/launch.err", dir + "/launch.out");
  while (!has_steps_and_a_checkpoint(out, lines, checkpoint) && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const pid_t victim = worker_of(launcher.pid, 1);
  EXPECT_GT(victim, 0) << read_text_file(dir + "/launch.err").value();
  if (victim > 0) kill(victim, SIGKILL);
  const int rc = wait_bounded(launcher.pid, limit);
  return {rc, read_text_file(dir + "/launch.err").value()};
}

TEST(Elastic, KilledRankContinuesOnThreeWithANewPlan) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/elastic_kill";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_text_file_atomic(dir + "/cluster.yaml", cpu_cluster(4)).ok());
  const int every = 4, steps = 80;
  ASSERT_TRUE(write_text_file_atomic(dir + "/job.yaml", tiny_job(steps, every)).ok());
  const std::string out = dir + "/run";
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  const auto [rc, err_text] = run_and_kill_rank_1(dir, every + 2, limit);
  EXPECT_EQ(rc, 0) << err_text;
  EXPECT_NE(err_text.find("lost rank(s) [1]"), std::string::npos) << err_text;

  // The recovery record: one restart on 3 devices, no more steps lost than the interval.
  auto rec = read_text_file(out + "/elastic/recoveries.jsonl");
  ASSERT_TRUE(rec.ok()) << err_text;
  const Json r = Json::parse(rec->substr(0, rec->find('\n')));
  EXPECT_EQ(r["lost_ranks"], Json::array({1}));
  EXPECT_EQ(r["devices_left"], 3);
  const int resumed = r["resumed_step"].get<int>();
  EXPECT_EQ(resumed % every, 0);
  EXPECT_GE(r["steps_lost"].get<int>(), 0);
  EXPECT_LE(r["steps_lost"].get<int>(), every);
  EXPECT_FALSE(r["restart_s"].is_null());
  auto plan1 = plan::load_plan(out + "/elastic/plan_1.json");
  ASSERT_TRUE(plan1.ok());
  EXPECT_EQ(plan1->used_devices().size(), 3u);

  expect_continues_as_a_fresh_run(dir, resumed, 3, steps, limit);
}

// SIGUSR1 to the launcher re-admits devices: the workers stop after their next
// checkpoint, the cluster file is read again (a third device was added to it meanwhile)
// and the run goes on with a new plan over the three, losing no step.
TEST(Elastic, SignalReadmitsTheDevicesOfTheClusterFile) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/elastic_readmit";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_text_file_atomic(dir + "/cluster.yaml", cpu_cluster(2)).ok());
  const int every = 4, steps = 40;
  ASSERT_TRUE(write_text_file_atomic(dir + "/job.yaml", tiny_job(steps, every)).ok());
  const std::string out = dir + "/run";
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  Child launcher = spawn_rank({kHarp, "launch", "--elastic", "--job", dir + "/job.yaml", "--", kHarp, "train",
                               "--out", out},
                              {"OMP_NUM_THREADS=1"}, dir + "/launch.err", dir + "/launch.out");
  while (line_count(out + "/metrics.jsonl") < 3 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(write_text_file_atomic(dir + "/cluster.yaml", cpu_cluster(3)).ok());
  kill(launcher.pid, SIGUSR1);
  const int rc = wait_bounded(launcher.pid, limit);
  const std::string err = read_text_file(dir + "/launch.err").value();
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("on SIGUSR1; re-planning over the 3 devices"), std::string::npos) << err;

  auto rec = read_text_file(out + "/elastic/recoveries.jsonl");
  ASSERT_TRUE(rec.ok()) << err;
  const Json r = Json::parse(rec->substr(0, rec->find('\n')));
  EXPECT_EQ(r["readmitted"], 1);
  EXPECT_EQ(r["devices_left"], 3);
  const int stopped = r["stopped_at_step"].get<int>();
  EXPECT_EQ(stopped % every, 0);
  EXPECT_EQ(r["resumed_step"], stopped);
  EXPECT_EQ(r["steps_lost"], 0);
  auto plan1 = plan::load_plan(out + "/elastic/plan_1.json");
  ASSERT_TRUE(plan1.ok());
  EXPECT_EQ(plan1->used_devices().size(), 3u);
  expect_continues_as_a_fresh_run(dir, stopped, 3, steps, limit);
}

// Re-planning on drift: two pools of one CPU each; pool b's device is made 6x slower
// after a few steps, 10x slower (the file through which a testbed slows a subcluster's devices;
// HARP_TESTBED names it, so no namespace is needed). The workers report the drift, the
// launcher plans for it, predicts the new plan faster than the restart costs and adopts it
// at the next checkpoint: fewer layers on b, no step lost, and the losses after the switch
// are those of a fresh run from that checkpoint on that plan.
TEST(Elastic, ADeviceDriftAdoptsAPlanMadeForItAtTheNextCheckpoint) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/elastic_drift";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_text_file_atomic(dir + "/cluster.yaml", R"(version: 1
name: cpu-pools
subclusters:
  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}
  - {name: b, device: cpu, nodes: 1, devices_per_node: 1}
links: [{between: [a, b], bandwidth_gbps: 12, latency_ms: 0.08}]
)").ok());
  // Steps of about 50 ms under the drift, a restart of about 2 s: enough steps left after
  // the switch for the plan to pay for its restart.
  const int every = 4, steps = 200;
  std::string job = tiny_job(steps, every);
  job.replace(job.find("timeout_s: 5}"), 13, "timeout_s: 5, drift_threshold: 1.5, drift_window: 5, replan_min_gain: 0.05}");
  ASSERT_TRUE(write_text_file_atomic(dir + "/job.yaml", job).ok());
  const std::string prefix = "elastictest" + std::to_string(getpid());
  const std::string slowdown = launch::testbed_slowdown_file(prefix, "b");
  std::filesystem::create_directories(launch::testbed_slowdown_dir(prefix));
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{launch::testbed_slowdown_dir(prefix)};
  const std::string out = dir + "/run";
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  Child launcher = spawn_rank({kHarp, "launch", "--elastic", "--job", dir + "/job.yaml", "--", kHarp, "train",
                               "--out", out},
                              {"OMP_NUM_THREADS=1", "HARP_TESTBED=" + prefix}, dir + "/launch.err", dir + "/launch.out");
  while (line_count(out + "/metrics.jsonl") < 12 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(write_text_file_atomic(slowdown, "10\n").ok());
  const int rc = wait_bounded(launcher.pid, limit);
  const std::string err = read_text_file(dir + "/launch.err").value();
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("the subclusters compute "), std::string::npos) << err;

  // The last plan adopted (a loaded machine may report an earlier drift of its own; a
  // record is written once complete: an adopted plan's after its restart).
  auto rec = read_text_file(out + "/elastic/recoveries.jsonl");
  ASSERT_TRUE(rec.ok()) << err;
  Json r = Json::object();
  for (size_t at = 0; at < rec->size();) {
    const size_t end = rec->find('\n', at);
    const Json line = Json::parse(rec->substr(at, end - at));
    if (line.value("adopted", false) && line.value("stopped_at_step", -1) > r.value("stopped_at_step", -1)) r = line;
    at = end == std::string::npos ? rec->size() : end + 1;
  }
  ASSERT_TRUE(r.contains("stopped_at_step")) << "no plan adopted\n" << *rec << err;
  EXPECT_GT(r["compute_drift"]["b"].get<double>(), 3 * r["compute_drift"]["a"].get<double>()) << err;
  EXPECT_LT(r["predicted_new_s"].get<double>(), r["predicted_old_s"].get<double>());
  const int stopped = r["stopped_at_step"].get<int>(), adopted = r["attempt"].get<int>();
  EXPECT_EQ(stopped % every, 0);
  EXPECT_EQ(r["resumed_step"], stopped);
  EXPECT_EQ(r["steps_lost"], 0);
  EXPECT_FALSE(r["measured_new_s"].is_null()) << err;
  auto plan0 = plan::load_plan(out + "/elastic/plan_0.json");
  auto plan1 = plan::load_plan(out + "/elastic/plan_" + std::to_string(adopted) + ".json");
  ASSERT_TRUE(plan0.ok() && plan1.ok());
  ASSERT_EQ(plan0->num_stages(), 2);
  ASSERT_EQ(plan1->num_stages(), 2);
  EXPECT_GT(plan1->stages[0].last_layer, plan0->stages[0].last_layer) << "layers move from b to a";
  expect_continues_as_a_fresh_run(dir, stopped, 2, steps, limit, adopted);
}

// Across machines: two launchers (node 0 and node 1, two CPU devices each) train one
// plan; a worker of node 1 is killed. The launchers tell each other their lost devices
// through OUT/elastic/, both re-plan the same over the three left (node 0 runs two
// ranks, node 1 one) and the run goes on, as a fresh 3-rank run from the checkpoint.
// Machines of 1 and 3 devices: node 1's launcher hosts devices 1..3 and loses rank 3.
TEST(Elastic, AcrossTwoMachinesAKilledRankContinuesOnThree) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/elastic_nodes";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_text_file_atomic(dir + "/cluster.yaml", cpu_machines(1, 3)).ok());
  const int every = 4, steps = 40;
  ASSERT_TRUE(write_text_file_atomic(dir + "/job.yaml", tiny_job(steps, every)).ok());
  const std::string out = dir + "/run", port = std::to_string(free_port_run(4));  // a port per restart
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  auto node = [&](int r) {
    const std::string n = std::to_string(r);
    return spawn_rank({kHarp, "launch", "--elastic", "--job", dir + "/job.yaml", "--nnodes", "2", "--node-rank", n,
                       "--master-addr", "127.0.0.1", "--master-port", port, "--grace-s", "1", "--", kHarp, "train",
                       "--out", out},
                      {"OMP_NUM_THREADS=1"}, dir + "/launch" + n + ".err", dir + "/launch" + n + ".out");
  };
  Child node0 = node(0), node1 = node(1);
  while (!has_steps_and_a_checkpoint(out, every + 2) && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const pid_t victim = worker_of(node1.pid, 3);
  ASSERT_GT(victim, 0) << read_text_file(dir + "/launch1.err").value();
  kill(victim, SIGKILL);
  const int rc1 = wait_bounded(node1.pid, limit), rc0 = wait_bounded(node0.pid, limit);
  const std::string err0 = read_text_file(dir + "/launch0.err").value(),
                    err1 = read_text_file(dir + "/launch1.err").value();
  ASSERT_EQ(rc0, 0) << err0 << "\n--- node 1:\n" << err1;
  ASSERT_EQ(rc1, 0) << err1 << "\n--- node 0:\n" << err0;
  EXPECT_NE(err0.find("lost rank(s) [3]"), std::string::npos) << err0;  // told by node 1

  auto rec = read_text_file(out + "/elastic/recoveries.jsonl");
  ASSERT_TRUE(rec.ok()) << err0;
  const Json r = Json::parse(rec->substr(0, rec->find('\n')));
  EXPECT_EQ(r["lost_devices"], Json::array({3}));
  EXPECT_EQ(r["devices_left"], 3);
  const int resumed = r["resumed_step"].get<int>();
  EXPECT_EQ(resumed % every, 0);
  EXPECT_LE(r["steps_lost"].get<int>(), every);
  auto plan1 = plan::load_plan(out + "/elastic/plan_1.json");
  ASSERT_TRUE(plan1.ok());
  EXPECT_EQ(plan1->used_devices().size(), 3u);
  expect_continues_as_a_fresh_run(dir, resumed, 3, steps, limit);
}

// When the survivors cannot hold the model, the launcher stops with the planner's reason
// and exit code 3 (a model that needs both devices' memory; one is killed).
TEST(Elastic, NoPlanForTheSurvivorsStopsWithThePlannersReason) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/elastic_no_plan";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_text_file_atomic(dir + "/cluster.yaml", R"(version: 1
name: cpu-two
devices:
  - {name: cpu-small, peak_tflops: 0.5, memory_gib: 0.5, memory_bandwidth_gbs: 25}
subclusters:
  - {name: cpus, device: cpu-small, nodes: 2, devices_per_node: 1,
     intra_node: {bandwidth_gbps: 12, latency_us: 80}, inter_node: {bandwidth_gbps: 12, latency_us: 80}}
)").ok());
  ASSERT_TRUE(write_text_file_atomic(dir + "/job.yaml", R"(version: 1
cluster: cluster.yaml
model: {family: gpt, name: gpt-512, num_blocks: 4, hidden: 512, heads: 4, seq_len: 128, vocab: 256, granularity: 2}
cost: {gradient_bytes_per_param_byte: 2}
planner: {strategy: harp, microbatches: 4, microbatch_size: 2}
training: {steps: 100000, checkpoint_every: 0, timeout_s: 5}
)").ok());
  const auto [rc, err] =
      run_and_kill_rank_1(dir, 2, std::chrono::steady_clock::now() + std::chrono::seconds(120), /*checkpoint=*/false);
  EXPECT_EQ(rc, 3) << err;
  EXPECT_NE(err.find("lost rank(s) [1]"), std::string::npos) << err;
  EXPECT_NE(err.find("no plan fits the 1 devices left: no placement fits every stage's memory"), std::string::npos)
      << err;
}

}  // namespace
}  // namespace harp
