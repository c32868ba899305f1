// A rank process that dies or freezes: the others stop within the timeout with a message
// naming the dead rank, the awaited action and the step — no hang. Real processes
// (`harp train`) on 127.0.0.1 over Gloo, killed (SIGKILL) or frozen (SIGSTOP) from
// outside once training runs: no fault injection inside HARP. The same cases at a chosen
// action run in-process in transport_fault_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <regex>
#include <thread>

#include "harp/common/document.h"
#include "harp/plan/plan_io.h"
#include "process_util.h"

namespace harp {
namespace {

struct Outcome {
  std::vector<int> codes;
  std::vector<std::string> errors;
  double elapsed_s = 0;
};

// Three `harp train` ranks of a 3-stage plan; once rank 0 has logged two steps, rank 1
// gets `signal`. The ranks still running after `limit` are killed (and reported as -1).
Outcome run_three_ranks(const std::string& name, int signal, int timeout_s, std::chrono::seconds limit,
                        int hung_rank = -1) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/" + name;
  std::filesystem::remove_all(dir);  // a previous run's metrics would fire the signal early
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_text_file_atomic(dir + "/model.json", R"({"family": "gpt", "num_blocks": 2, "hidden": 32,
      "heads": 4, "seq_len": 16, "vocab": 64, "granularity": 1})").ok());
  EXPECT_TRUE(write_text_file_atomic(dir + "/plan.json", R"({"version": 1, "microbatches": 4,
      "microbatch_size": 2, "schedule": "1f1b", "stages": [
      {"layers": [0, 2], "fwd_s": 1, "bwd_s": 2}, {"layers": [2, 3], "fwd_s": 1, "bwd_s": 2},
      {"layers": [3, 4], "fwd_s": 1, "bwd_s": 2}]})").ok());
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  std::vector<Child> ranks;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::string> env = {"RANK=" + std::to_string(r), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"};
    ranks.push_back(spawn_rank({std::string(HARP_BINARY_DIR) + "/src/cli/harp", "train", "--plan", dir + "/plan.json",
                                "--model", dir + "/model.json", "--steps", "1000000", "--quiet", "--timeout-s",
                                std::to_string(timeout_s), "--out", dir + "/run"},
                               env, dir + "/rank" + std::to_string(r) + ".err"));
  }
  Outcome out;
  const auto deadline = start + limit;
  while (line_count(dir + "/run/metrics.jsonl") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(line_count(dir + "/run/metrics.jsonl"), 2) << "training never started";
  kill(ranks[1].pid, signal);
  for (int r = 0; r < 3; ++r) {
    if (r == hung_rank) continue;
    out.codes.push_back(wait_bounded(ranks[r].pid, deadline));
  }
  out.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (hung_rank >= 0) {  // the survivors are done: now stop the one that hangs
    kill(ranks[hung_rank].pid, SIGKILL);
    int status = 0;
    waitpid(ranks[hung_rank].pid, &status, 0);
    out.codes.insert(out.codes.begin() + hung_rank, -1);
  }
  for (auto& c : ranks) out.errors.push_back(read_text_file(c.err_file).value());
  return out;
}

// Every survivor exits 1 with one line naming the step and what it was doing (a
// pipeline action, or the collective it was in); a survivor that failed waiting for a
// point-to-point transfer names rank 1 as its peer. (The signal lands at a random point:
// a survivor in a collective when a peer goes gets Gloo's message, which names that peer
// by address only. Naming at a chosen action is tested in-process in
// transport_fault_test.cc.)
void expect_named(const Outcome& o) {
  for (int rank : {0, 2}) {
    const std::string& err = o.errors[rank];
    EXPECT_EQ(o.codes[rank], 1) << err;
    EXPECT_TRUE(std::regex_search(err, std::regex("at step [0-9]+"))) << "names the step: " << err;
    EXPECT_TRUE(std::regex_search(err, std::regex("[0-9](RECV|SEND)_[FB][0-9]|REDUCE_GRAD|STEP|metrics")))
        << "names the awaited action: " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
    std::smatch peer;
    if (std::regex_search(err, peer, std::regex("(from|to) rank ([0-9]+):"))) {
      EXPECT_EQ(peer[2], "1") << "names the failed rank: " << err;
    }
  }
}

TEST(Failure, KilledRankStopsTheOthersWithinTheTimeout) {
  const int timeout_s = 5;
  Outcome o = run_three_ranks("failure_killed", SIGKILL, timeout_s, std::chrono::seconds(60));
  EXPECT_EQ(o.codes[1], 128 + SIGKILL) << "the death from outside";
  expect_named(o);
  // Start-up, two steps, then at most one timeout: a dead peer is usually noticed at once.
  EXPECT_LT(o.elapsed_s, timeout_s + 20) << "took " << o.elapsed_s << " s";
}

TEST(Failure, StalledRankTimesOutTheOthers) {
  const int timeout_s = 3;
  Outcome o = run_three_ranks("failure_stalled", SIGSTOP, timeout_s, std::chrono::seconds(60), /*hung_rank=*/1);
  expect_named(o);
  EXPECT_NE(o.errors[0].find("imed out"), std::string::npos) << o.errors[0];  // Gloo's or ours
  EXPECT_GE(o.elapsed_s, timeout_s) << "a stall is only detected by the timeout";
  EXPECT_LT(o.elapsed_s, timeout_s + 20) << "took " << o.elapsed_s << " s";
}

}  // namespace
}  // namespace harp

namespace harp {
namespace {

// Regression (hardening issue): two runs on one --out both exited 0 and interleaved
// metrics.jsonl. The second is now refused while the first holds the folder.
TEST(Failure, SecondRunOnTheSameOutIsRefused) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/failure_same_out";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_text_file_atomic(dir + "/model.json", R"({"family": "gpt", "num_blocks": 2, "hidden": 32,
      "heads": 4, "seq_len": 16, "vocab": 64, "granularity": 1})").ok());
  EXPECT_TRUE(write_text_file_atomic(dir + "/plan.json", R"({"version": 1, "microbatches": 2,
      "microbatch_size": 2, "schedule": "1f1b", "stages": [{"layers": [0, 4], "fwd_s": 1, "bwd_s": 2}]})").ok());
  auto start = [&](const std::string& name, const std::string& steps) {
    return spawn_rank({std::string(HARP_BINARY_DIR) + "/src/cli/harp", "train", "--plan", dir + "/plan.json",
                       "--model", dir + "/model.json", "--steps", steps, "--quiet", "--out", dir + "/run"},
                      {"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(free_port()),
                       "OMP_NUM_THREADS=1"},
                      dir + "/" + name + ".err");
  };
  Child first = start("first", "1000000");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (line_count(dir + "/run/metrics.jsonl") < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Child second = start("second", "3");
  const int rc = wait_bounded(second.pid, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  kill(first.pid, SIGKILL);
  int status = 0;
  waitpid(first.pid, &status, 0);
  const std::string err = read_text_file(second.err_file).value();
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("another run is using this output folder"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // The lock dies with its holder: a new run on the folder now starts.
  Child third = start("third", "2");
  EXPECT_EQ(wait_bounded(third.pid, std::chrono::steady_clock::now() + std::chrono::seconds(60)), 0)
      << read_text_file(third.err_file).value();
}

// Across machines the store needs a shared secret; without one the run is refused
// before any connection (the address is a name that cannot resolve, so a regression
// sends nothing anywhere).
TEST(Failure, RemoteRendezvousWithoutASecretIsRefused) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/failure_secret";
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_text_file_atomic(dir + "/plan.json", R"({"version": 1, "microbatches": 2,
      "microbatch_size": 2, "schedule": "1f1b", "stages": [{"layers": [0, 4], "fwd_s": 1, "bwd_s": 2}]})").ok());
  Child c = spawn_rank({std::string(HARP_BINARY_DIR) + "/src/cli/harp", "train", "--plan", dir + "/plan.json",
                        "--model", "gpt-tiny", "--granularity", "1", "--out", dir + "/run"},
                       {"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=harp-no-such-host.invalid", "MASTER_PORT=29999"},
                       dir + "/err");
  const int rc = wait_bounded(c.pid, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  const std::string err = read_text_file(c.err_file).value();
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("HARP_RENDEZVOUS_SECRET"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(Failure, BadMasterPortIsOneLine) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/failure_port";
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_text_file_atomic(dir + "/plan.json", R"({"version": 1, "microbatches": 2,
      "microbatch_size": 2, "schedule": "1f1b", "stages": [{"layers": [0, 4], "fwd_s": 1, "bwd_s": 2}]})").ok());
  for (const char* port : {"abc", "70000", "-1"}) {
    Child c = spawn_rank({std::string(HARP_BINARY_DIR) + "/src/cli/harp", "train", "--plan", dir + "/plan.json",
                          "--model", "gpt-tiny", "--granularity", "1", "--out", dir + "/run"},
                         {"RANK=0", "WORLD_SIZE=1", std::string("MASTER_PORT=") + port}, dir + "/err");
    const int rc = wait_bounded(c.pid, std::chrono::steady_clock::now() + std::chrono::seconds(30));
    const std::string err = read_text_file(c.err_file).value();
    EXPECT_EQ(rc, 1) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

}  // namespace
}  // namespace harp

namespace harp {
namespace {

// Several machines, torchrun's way: two launchers (node ranks 0 and 1, one worker each)
// on loopback meet at rank 0's store and train one 2-stage plan together, with exactly
// the losses of one launcher running both ranks.
const char* kTwoStagePlan = R"({"version": 1, "microbatches": 4, "microbatch_size": 2, "schedule": "1f1b",
    "stages": [{"layers": [0, 2], "fwd_s": 1, "bwd_s": 2}, {"layers": [2, 4], "fwd_s": 1, "bwd_s": 2}]})";

std::string two_node_dir(const std::string& name) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_text_file_atomic(dir + "/model.json", R"({"family": "gpt", "num_blocks": 2, "hidden": 32,
      "heads": 4, "seq_len": 16, "vocab": 64, "granularity": 1})").ok());
  EXPECT_TRUE(write_text_file_atomic(dir + "/plan.json", kTwoStagePlan).ok());
  return dir;
}

std::vector<std::string> launch_args(const std::string& dir, std::vector<std::string> launch_flags,
                                     const std::string& out, const std::string& steps) {
  const std::string harp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";
  std::vector<std::string> args = {harp, "launch"};
  args.insert(args.end(), launch_flags.begin(), launch_flags.end());
  for (const std::string& a : {std::string("--"), harp, std::string("train"), std::string("--plan"), dir + "/plan.json",
                               std::string("--model"), dir + "/model.json", std::string("--steps"), steps,
                               std::string("--timeout-s"), std::string("5"), std::string("--out"), dir + "/" + out})
    args.push_back(a);
  return args;
}

std::vector<double> losses_of(const std::string& metrics) {
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss") && j.contains("step")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

std::vector<std::string> node_flags(int node_rank, int port) {
  return {"--nnodes", "2", "--node-rank", std::to_string(node_rank), "--master-addr", "127.0.0.1", "--master-port",
          std::to_string(port), "--nproc", "1", "--grace-s", "1"};
}

TEST(MultiNode, TwoLaunchersOnLoopbackTrainOnePlan) {
  const std::string dir = two_node_dir("multinode_train");
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  Child one = spawn_rank(launch_args(dir, {"--nproc", "2"}, "one", "4"), {"OMP_NUM_THREADS=1"}, dir + "/one.err");
  ASSERT_EQ(wait_bounded(one.pid, limit), 0) << read_text_file(one.err_file).value();
  const int port = free_port();
  Child node0 = spawn_rank(launch_args(dir, node_flags(0, port), "two", "4"), {"OMP_NUM_THREADS=1"}, dir + "/n0.err");
  Child node1 = spawn_rank(launch_args(dir, node_flags(1, port), "two", "4"), {"OMP_NUM_THREADS=1"}, dir + "/n1.err");
  EXPECT_EQ(wait_bounded(node0.pid, limit), 0) << read_text_file(node0.err_file).value();
  EXPECT_EQ(wait_bounded(node1.pid, limit), 0) << read_text_file(node1.err_file).value();
  const std::vector<double> want = losses_of(dir + "/one/metrics.jsonl"), got = losses_of(dir + "/two/metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(got, want);
}

// Machines with different numbers of workers (a node of 8 V100s beside one of 4 A100s,
// scaled down to 2 + 1 and 1 + 3): the launchers agree on the ranks in node-rank order,
// each rank runs the plan's device on its own machine (its own line says so), and the
// losses are those of one launcher running every rank. 2 + 1 takes each node's workers
// from the plan (`nodes`); 1 + 3 gives --nproc per node from SLURM's variables.
const char* kPlanTwoPlusOne = R"({"version": 1, "microbatches": 4, "microbatch_size": 2, "schedule": "1f1b",
    "stages": [{"layers": [0, 2], "devices": [0], "nodes": [0], "fwd_s": 1, "bwd_s": 2},
               {"layers": [2, 3], "devices": [1], "nodes": [0], "fwd_s": 1, "bwd_s": 2},
               {"layers": [3, 4], "devices": [2], "nodes": [1], "fwd_s": 1, "bwd_s": 2}]})";
const char* kPlanOnePlusThree = R"({"version": 1, "microbatches": 4, "microbatch_size": 2, "schedule": "1f1b",
    "stages": [{"layers": [0, 1], "devices": [0], "nodes": [0], "fwd_s": 1, "bwd_s": 2},
               {"layers": [1, 2], "devices": [1], "nodes": [1], "fwd_s": 1, "bwd_s": 2},
               {"layers": [2, 3], "devices": [2], "nodes": [1], "fwd_s": 1, "bwd_s": 2},
               {"layers": [3, 4], "devices": [3], "nodes": [1], "fwd_s": 1, "bwd_s": 2}]})";

std::vector<std::string> train_on(const std::string& dir, const std::string& plan,
                                  std::vector<std::string> launch_flags, const std::string& out) {
  std::vector<std::string> args = launch_args(dir, std::move(launch_flags), out, "4");
  *std::find(args.begin(), args.end(), dir + "/plan.json") = dir + "/" + plan;
  return args;
}

TEST(MultiNode, UnequalNodesTrainOnePlan) {
  const std::string dir = two_node_dir("multinode_unequal");
  ASSERT_TRUE(write_text_file_atomic(dir + "/two_plus_one.json", kPlanTwoPlusOne).ok());
  ASSERT_TRUE(write_text_file_atomic(dir + "/one_plus_three.json", kPlanOnePlusThree).ok());
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  const std::vector<std::string> env = {"OMP_NUM_THREADS=1"};
  struct Case {
    std::string plan;
    int world;
    std::vector<std::vector<std::string>> node_flags;  // per node
    std::vector<std::vector<std::string>> node_env;
  };
  const int p1 = free_port(), p2 = free_port();
  auto flags = [](int node, int port) {
    return std::vector<std::string>{"--nnodes",      "2",         "--node-rank",   std::to_string(node),
                                    "--master-addr", "127.0.0.1", "--master-port", std::to_string(port),
                                    "--grace-s",     "1"};
  };
  auto slurm = [](int node) {
    return std::vector<std::string>{"OMP_NUM_THREADS=1", "SLURM_NNODES=2", "SLURM_NODEID=" + std::to_string(node),
                                    "SLURM_JOB_NODELIST=localhost", "SLURM_JOB_ID=7"};
  };
  auto with = [](std::vector<std::string> a, std::vector<std::string> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<Case> cases = {
      {"two_plus_one.json",
       3,
       {with(flags(0, p1), {"--plan", dir + "/two_plus_one.json"}),
        with(flags(1, p1), {"--plan", dir + "/two_plus_one.json"})},
       {env, env}},
      {"one_plus_three.json",
       4,
       {{"--slurm", "--master-port", std::to_string(p2), "--nproc", "1", "--grace-s", "1"},
        {"--slurm", "--master-port", std::to_string(p2), "--nproc", "3", "--grace-s", "1"}},
       {slurm(0), slurm(1)}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.plan);
    const std::string one_out = "one_" + c.plan, two_out = "two_" + c.plan;
    Child one = spawn_rank(train_on(dir, c.plan, {"--nproc", std::to_string(c.world)}, one_out), env, dir + "/one.err");
    ASSERT_EQ(wait_bounded(one.pid, limit), 0) << read_text_file(one.err_file).value();
    std::vector<Child> nodes;
    for (int n = 0; n < 2; ++n)
      nodes.push_back(spawn_rank(train_on(dir, c.plan, c.node_flags[n], two_out), c.node_env[n],
                                 dir + "/n" + std::to_string(n) + ".err", dir + "/n" + std::to_string(n) + ".out"));
    for (int n = 0; n < 2; ++n)
      ASSERT_EQ(wait_bounded(nodes[n].pid, limit), 0) << read_text_file(nodes[n].err_file).value();
    const std::vector<double> want = losses_of(dir + "/" + one_out + "/metrics.jsonl"),
                              got = losses_of(dir + "/" + two_out + "/metrics.jsonl");
    ASSERT_EQ(want.size(), 4u);
    EXPECT_EQ(got, want);
    // Each rank's own line: the machine it runs on is the one the plan gives its device.
    auto plan = plan::load_plan(dir + "/" + c.plan);
    ASSERT_TRUE(plan.ok());
    int seen = 0;
    for (int n = 0; n < 2; ++n) {
      const std::string out = read_text_file(dir + "/n" + std::to_string(n) + ".out").value();
      const std::regex line(
          "\\[rank ([0-9]+)\\] rank [0-9]+ of ([0-9]+): machine ([0-9]+) of 2, local rank [0-9]+; "
          "the plan's device ([0-9]+) \\(stage [0-9]+, machine ([0-9]+)\\)");
      for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
        const int rank = std::stoi((*it)[1]), device = std::stoi((*it)[4]);
        EXPECT_EQ(std::stoi((*it)[2]), c.world);
        EXPECT_EQ(std::stoi((*it)[3]), n);
        EXPECT_EQ(device, plan->used_devices()[static_cast<size_t>(rank)]);
        EXPECT_EQ(plan->node_of_device(device), n) << "rank " << rank;
        ++seen;
      }
    }
    EXPECT_EQ(seen, c.world);
  }
}

// The same plan launched as 1 + 2 where it places 2 + 1: the rank whose device is on the
// other machine refuses in one line giving the plan's workers per machine.
TEST(MultiNode, WorkersThatDisagreeWithThePlansMachinesAreRefused) {
  const std::string dir = two_node_dir("multinode_disagree");
  ASSERT_TRUE(write_text_file_atomic(dir + "/two_plus_one.json", kPlanTwoPlusOne).ok());
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const int port = free_port();
  std::vector<Child> nodes;
  for (int n = 0; n < 2; ++n) {
    std::vector<std::string> f = node_flags(n, port);
    f[f.size() - 3] = n == 0 ? "1" : "2";  // --nproc
    nodes.push_back(spawn_rank(train_on(dir, "two_plus_one.json", f, "run"), {"OMP_NUM_THREADS=1"},
                               dir + "/n" + std::to_string(n) + ".err", dir + "/n" + std::to_string(n) + ".out"));
  }
  std::string out;
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(wait_bounded(nodes[n].pid, limit), 1) << read_text_file(nodes[n].err_file).value();
    out += read_text_file(dir + "/n" + std::to_string(n) + ".out").value();
  }
  EXPECT_NE(out.find("[rank 1] harp train: rank 1 runs on machine 1 (GROUP_RANK), but the plan puts its device 1 on "
                     "machine 0; launch each machine with the plan's workers on it (2 + 1)"),
            std::string::npos)
      << out;
}

// Killing one machine's launcher (its worker dies with it) stops the other machine's
// within the timeout: its worker names what it was waiting for, its launcher exits
// with the worker's code and says who failed.
TEST(MultiNode, KillingOneNodesLauncherStopsTheOther) {
  const std::string dir = two_node_dir("multinode_kill");
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  Child node0 = spawn_rank(launch_args(dir, node_flags(0, port), "run", "1000000"), {"OMP_NUM_THREADS=1"},
                           dir + "/n0.err", dir + "/n0.out");
  Child node1 = spawn_rank(launch_args(dir, node_flags(1, port), "run", "1000000"), {"OMP_NUM_THREADS=1"},
                           dir + "/n1.err");
  const auto limit = start + std::chrono::seconds(60);
  while (line_count(dir + "/run/metrics.jsonl") < 2 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(line_count(dir + "/run/metrics.jsonl"), 2) << "training never started";
  const auto killed = std::chrono::steady_clock::now();
  kill(node1.pid, SIGKILL);
  int status = 0;
  waitpid(node1.pid, &status, 0);
  const int rc = wait_bounded(node0.pid, limit);
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string err = read_text_file(node0.err_file).value(), out = read_text_file(dir + "/n0.out").value();
  EXPECT_EQ(rc, 1) << err;
  EXPECT_LT(stop_s, 5 + 10) << "the timeout is 5 s";
  EXPECT_NE(err.find("harp launch: rank 0 exited with code 1"), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[rank 0\\] harp train: .*at step [0-9]+"))) << out;
}

}  // namespace
}  // namespace harp
