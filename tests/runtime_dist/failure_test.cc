// A rank that dies: the others stop within the timeout with a message naming the dead
// rank, the awaited action and the step — no hang. Real processes (`harp train`) on
// 127.0.0.1, because a thread cannot die the way a process does; every wait is bounded.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <thread>

#include "harp/common/document.h"
#include "harp/plan/plan_io.h"

extern char** environ;

namespace harp {
namespace {

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

struct Child {
  pid_t pid = -1;
  std::string err_file;
};

Child spawn_rank(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& err_file) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> all_env = env;
  for (char** e = environ; *e; ++e) all_env.push_back(*e);
  for (const auto& e : all_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  Child c;
  c.err_file = err_file;
  EXPECT_EQ(posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

// Waits up to `deadline`; kills the child (and fails) if it is still running.
int wait_bounded(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "rank " << pid << " hung past its deadline";
  return -1;
}

struct Outcome {
  std::vector<int> codes;
  std::vector<std::string> errors;
  double elapsed_s = 0;
};

// Three `harp train` ranks of a 3-stage plan; `fault` is the injection environment for
// rank 1. The ranks still running after `limit` are killed (and reported as -1).
Outcome run_three_ranks(const std::string& name, const std::vector<std::string>& fault, int timeout_s,
                        std::chrono::seconds limit, int hung_rank = -1) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/" + name;
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
    env.insert(env.end(), fault.begin(), fault.end());
    ranks.push_back(spawn_rank({std::string(HARP_BINARY_DIR) + "/src/cli/harp", "train", "--plan", dir + "/plan.json",
                                "--model", dir + "/model.json", "--steps", "50", "--quiet", "--timeout-s",
                                std::to_string(timeout_s), "--out", dir + "/run"},
                               env, dir + "/rank" + std::to_string(r) + ".err"));
  }
  Outcome out;
  const auto deadline = start + limit;
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

void expect_named(const Outcome& o, int rank) {
  const std::string& err = o.errors[rank];
  EXPECT_EQ(o.codes[rank], 1) << err;
  EXPECT_TRUE(err.find("from rank 1:") != std::string::npos || err.find("to rank 1:") != std::string::npos)
      << "names the failed rank: " << err;
  EXPECT_NE(err.find("step 2"), std::string::npos) << "names the step: " << err;
  bool names_action = false;
  for (const char* a : {"RECV_F", "RECV_B", "SEND_F", "SEND_B"}) names_action = names_action || err.find(a) != std::string::npos;
  EXPECT_TRUE(names_action) << "names the awaited action: " << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
}

TEST(Failure, KilledRankStopsTheOthersWithinTheTimeout) {
  const int timeout_s = 5;
  Outcome o = run_three_ranks("failure_killed", {"HARP_TEST_EXIT_RANK=1", "HARP_TEST_EXIT_STEP=2"}, timeout_s,
                              std::chrono::seconds(60));
  EXPECT_EQ(o.codes[1], 17) << "the injected death";
  expect_named(o, 0);
  expect_named(o, 2);
  // Start-up, two steps, then at most one timeout: a dead peer is usually noticed at once.
  EXPECT_LT(o.elapsed_s, timeout_s + 20) << "took " << o.elapsed_s << " s";
}

TEST(Failure, StalledRankTimesOutTheOthers) {
  const int timeout_s = 3;
  Outcome o = run_three_ranks("failure_stalled", {"HARP_TEST_STALL_RANK=1", "HARP_TEST_STALL_STEP=2"}, timeout_s,
                              std::chrono::seconds(60), /*hung_rank=*/1);
  expect_named(o, 0);
  expect_named(o, 2);
  EXPECT_NE(o.errors[0].find("imed out"), std::string::npos) << o.errors[0];  // Gloo's or ours
  EXPECT_GE(o.elapsed_s, timeout_s) << "a stall is only detected by the timeout";
  EXPECT_LT(o.elapsed_s, timeout_s + 20) << "took " << o.elapsed_s << " s";
}

}  // namespace
}  // namespace harp
