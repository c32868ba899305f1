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
