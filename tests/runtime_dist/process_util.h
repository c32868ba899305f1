// Worker processes for the multi-process tests: a free loopback port, spawning with
// stderr (and stdout) to files, a bounded wait, counting a file's lines, and comparing an
// elastic run after a restart with a fresh run from the same checkpoint.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "harp/common/document.h"

extern char** environ;

namespace harp {

inline int free_port() {
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

// A port P of 127.0.0.1 with P .. P + count - 1 all free, below the kernel's ephemeral
// range (32768 and up), where no other test's connections take ports meanwhile: for a
// launcher that moves to the next port on each restart (harp launch --elastic --nnodes).
inline int free_port_run(int count) {
  auto bindable = [](int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  };
  for (int base = 20000 + static_cast<int>(getpid() % 1000) * 10; base + count < 32768; base += 7) {
    bool all = true;
    for (int p = base; p < base + count && all; ++p) all = bindable(p);
    if (all) return base;
  }
  return free_port();
}

struct Child {
  pid_t pid = -1;
  std::string err_file;
};

// Stdout goes to `out_file` ("": /dev/null).
inline Child spawn_rank(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& err_file,
                 const std::string& out_file = "") {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out_file.empty())
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  else
    posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
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
inline int wait_bounded(pid_t pid, std::chrono::steady_clock::time_point deadline) {
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

// Lines in a file (0 if it does not exist yet).
inline int line_count(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The last loss logged for every step of a metrics.jsonl (a resumed run appends).
inline std::map<int, double> losses_by_step(const std::string& metrics) {
  std::map<int, double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss") && j.contains("step")) out[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return out;
}

// The elastic run in DIR/run, from its checkpoint of step `resumed` on, has the losses of
// a fresh `nproc`-rank run (on 127.0.0.1, `harp` the binary) started from that checkpoint
// with its plan_<plan>.json (`train_args` added to its harp train, as the run's were); and
// every one of the `steps` steps is logged (the lost ones rerun).
inline void expect_continues_as_a_fresh_run(const std::string& harp, const std::string& dir, int resumed, int nproc,
                                            int steps, std::chrono::steady_clock::time_point limit, int plan,
                                            const std::vector<std::string>& train_args = {}) {
  const std::string out = dir + "/run", fresh = dir + "/fresh";
  std::filesystem::create_directories(fresh + "/checkpoints");
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/step_%06d", resumed);
  std::filesystem::copy(out + "/checkpoints" + step_dir, fresh + "/checkpoints" + step_dir);
  ASSERT_TRUE(write_text_file_atomic(fresh + "/checkpoints/latest", std::to_string(resumed) + "\n").ok());
  std::vector<std::string> command = {harp, "launch", "--nproc", std::to_string(nproc), "--", harp, "train", "--job",
                                     dir + "/job.yaml", "--plan", out + "/elastic/plan_" + std::to_string(plan) + ".json",
                                     "--resume", "--out", fresh};
  command.insert(command.end(), train_args.begin(), train_args.end());
  Child again = spawn_rank(command, {"OMP_NUM_THREADS=1"}, dir + "/fresh.err");
  ASSERT_EQ(wait_bounded(again.pid, limit), 0) << read_text_file(dir + "/fresh.err").value();
  const auto elastic = losses_by_step(out + "/metrics.jsonl"), want = losses_by_step(fresh + "/metrics.jsonl");
  ASSERT_EQ(want.size(), static_cast<size_t>(steps - resumed));
  ASSERT_EQ(elastic.size(), static_cast<size_t>(steps));
  for (const auto& [step, loss] : want) EXPECT_EQ(elastic.at(step), loss) << "step " << step;
}

}  // namespace harp
