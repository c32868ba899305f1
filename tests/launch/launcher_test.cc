// The local launcher on real processes (/bin/sh workers): torchrun variables, per-rank
// output prefixes, fail-fast with bounded shutdown, signals, and unexecutable commands.
// Every worker that could outlive a test sleeps at most 30 s and is expected to be
// stopped in well under 10 s.
#include "harp/launch/launcher.h"

#include <gtest/gtest.h>

#include "testutil/status.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "launch/test_util.h"

namespace harp::launch {
namespace {

using launch_test::split_lines;
using launch_test::TempDir;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

LaunchOptions sh(int nproc, const std::string& script) {
  LaunchOptions o;
  o.nproc = nproc;
  o.command = {"/bin/sh", "-c", script};
  return o;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Launcher, TorchrunVariablesAndExtraEnvReachEveryWorker) {
  LaunchOptions o =
      sh(3, "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $FOO");
  o.env["FOO"] = "bar";
  o.env["RANK"] = "99";  // the launcher's own variables win
  std::ostringstream out;
  auto r = launch(o, out);
  HARP_ASSERT_OK(r);
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->failed_rank, -1);
  EXPECT_EQ(r->summary, "all 3 workers exited 0");
  std::vector<std::string> lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), 3u) << out.str();
  std::sort(lines.begin(), lines.end());
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    std::istringstream in(lines[rank]);
    std::string prefix, rank_tag, addr, foo;
    int rank_v, world, local_rank, local_world, port;
    in >> prefix >> rank_tag >> rank_v >> world >> local_rank >> local_world >> addr >> port >> foo;
    EXPECT_EQ(prefix + " " + rank_tag, "[rank " + std::to_string(rank) + "]") << lines[rank];
    EXPECT_EQ(rank_v, rank);
    EXPECT_EQ(world, 3);
    EXPECT_EQ(local_rank, rank);
    EXPECT_EQ(local_world, 3);
    EXPECT_EQ(addr, "127.0.0.1");
    EXPECT_GT(port, 0);
    EXPECT_EQ(foo, "bar");
    ports.insert(std::to_string(port));
  }
  EXPECT_EQ(ports.size(), 1u) << "every rank must see the same MASTER_PORT";
}

TEST(Launcher, EveryLineOfStdoutAndStderrIsPrefixedWithItsRank) {
  // A partial last line (printf without '\n') is flushed when the worker exits.
  std::ostringstream out;
  auto r = launch(sh(2, "echo out-$RANK; echo err-$RANK >&2; echo two words; printf tail-$RANK"), out);
  HARP_ASSERT_OK(r);
  EXPECT_EQ(r->exit_code, 0);
  std::multiset<std::string> got;
  for (const std::string& line : split_lines(out.str())) got.insert(line);
  std::multiset<std::string> want;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    for (const char* s : {"out-", "err-", "tail-"}) want.insert(p + s + std::to_string(rank));
    want.insert(p + "two words");
  }
  EXPECT_EQ(got, want) << out.str();
}

TEST(Launcher, AFailingWorkerStopsTheOthersQuickly) {
  // Rank 1 waits (bounded) until the sleepers have written the pid of a background
  // child, then exits 3; the sleepers and their children must be gone soon after.
  TempDir dir;
  const std::string script =
      "if [ \"$RANK\" = 1 ]; then i=0; while { [ ! -s " + dir.file("pid.0") + " ] || [ ! -s " +
      dir.file("pid.2") + " ]; } && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done; exit 3; fi; "
      "sleep 30 & echo $! > " + dir.file("tmp.$RANK") + "; mv " + dir.file("tmp.$RANK") + " " +
      dir.file("pid.$RANK") + "; wait";
  LaunchOptions o = sh(3, script);
  o.grace_s = 2.0;
  std::ostringstream out;
  const auto start = Clock::now();
  auto r = launch(o, out);
  const double elapsed = seconds_since(start);
  HARP_ASSERT_OK(r);
  EXPECT_LT(elapsed, 10.0);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->failed_rank, 1);
  EXPECT_EQ(r->summary, "rank 1 exited with code 3; stopped the other 2 workers");
  for (const char* f : {"pid.0", "pid.2"}) {
    std::ifstream in(dir.file(f));
    pid_t child = 0;
    ASSERT_TRUE(in >> child) << f << " was not written: " << out.str();
    EXPECT_TRUE(launch_test::process_gone(child, milliseconds(2000)))
        << "grandchild " << child << " survived";
  }
}

// Rank 0 ignores SIGTERM (and would sleep 30 s); rank 1 fails with exit code 5 once rank
// 0 is ready: the launcher has to escalate to SIGKILL.
LaunchOptions rank0_ignores_sigterm(const TempDir& dir) {
  return sh(2, "if [ \"$RANK\" = 0 ]; then trap '' TERM; touch " + dir.file("ready") +
                   "; sleep 30; fi; i=0; while [ ! -f " + dir.file("ready") +
                   " ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done; exit 5");
}

TEST(Launcher, AWorkerIgnoringSigtermGetsSigkillAfterTheGracePeriod) {
  TempDir dir;
  LaunchOptions o = rank0_ignores_sigterm(dir);
  o.grace_s = 0.3;
  std::ostringstream out;
  const auto start = Clock::now();
  auto r = launch(o, out);
  HARP_ASSERT_OK(r);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(r->exit_code, 5);
  EXPECT_EQ(r->failed_rank, 1);
  EXPECT_NE(r->summary.find("rank 0 still ran 0.3 s after SIGTERM and got SIGKILL"), std::string::npos)
      << r->summary;
}

// The grace period on the launcher's clock: a fake one that jumps a minute at every look
// makes an hour's grace pass at once, so the stalled worker is killed without the test
// waiting for it.
class JumpingClock : public launch::Clock {
 public:
  double now_s() override { return t_ += 60.0; }
  double unix_s() override { return 1.7e9 + t_; }
  void sleep_s(double seconds) override { t_ += seconds; }

 private:
  double t_ = 0;
};

TEST(Launcher, TheGracePeriodRunsOnTheLaunchersClock) {
  TempDir dir;
  LaunchOptions o = rank0_ignores_sigterm(dir);
  o.grace_s = 3600;
  JumpingClock clock;
  o.clock = &clock;
  std::ostringstream out;
  const auto start = Clock::now();
  auto r = launch(o, out);
  HARP_ASSERT_OK(r);
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_EQ(r->exit_code, 5);
  EXPECT_EQ(r->lost_ranks, std::vector<int>{0});  // stalled: it ignored SIGTERM
  EXPECT_NE(r->summary.find("got SIGKILL"), std::string::npos) << r->summary;
}

TEST(Launcher, AWorkerKilledByASignalReports128PlusTheSignal) {
  std::ostringstream out;
  auto r = launch(sh(1, "kill -KILL $$"), out);
  HARP_ASSERT_OK(r);
  EXPECT_EQ(r->exit_code, 128 + SIGKILL);
  EXPECT_EQ(r->failed_rank, 0);
  EXPECT_NE(r->summary.find("rank 0 was killed by signal 9"), std::string::npos) << r->summary;
}

TEST(Launcher, ACommandThatCannotBeExecutedIsAWorkerFailingWith127) {
  LaunchOptions o;
  o.nproc = 2;
  o.command = {"harp-no-such-command-xyz", "--flag"};
  std::ostringstream out;
  auto r = launch(o, out);
  HARP_ASSERT_OK(r);
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_TRUE(r->failed_rank == 0 || r->failed_rank == 1) << r->failed_rank;
  EXPECT_NE(r->summary.find("could not execute 'harp-no-such-command-xyz': No such file or directory"),
            std::string::npos)
      << r->summary;
  EXPECT_NE(out.str().find("[rank 0] harp launch: cannot execute 'harp-no-such-command-xyz'"),
            std::string::npos)
      << out.str();
}

TEST(Launcher, SigintToTheLauncherStopsEveryWorker) {
  TempDir dir;
  LaunchOptions o = sh(2, "touch " + dir.file("started.$RANK") + "; sleep 30");
  o.grace_s = 1.0;
  // The signal is sent only once both workers run, so the launcher's handler is in place.
  std::thread interrupter([&] {
    if (launch_test::wait_for_file(dir.file("started.0"), milliseconds(5000)) &&
        launch_test::wait_for_file(dir.file("started.1"), milliseconds(5000)))
      kill(getpid(), SIGINT);
  });
  std::ostringstream out;
  const auto start = Clock::now();
  auto r = launch(o, out);
  interrupter.join();
  HARP_ASSERT_OK(r);
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_EQ(r->exit_code, 128 + SIGINT);
  EXPECT_EQ(r->failed_rank, -1);
  EXPECT_EQ(r->summary, "the launcher got signal 2 (Interrupt); stopped all 2 workers");
}

TEST(Launcher, BadOptionsAreErrorsNotLaunches) {
  std::ostringstream out;
  LaunchOptions o = sh(0, "true");
  auto r = launch(o, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nproc = 0"), std::string::npos) << r.status().message();
  o = LaunchOptions();
  r = launch(o, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no worker command"), std::string::npos) << r.status().message();
  o = sh(1, "true");
  o.grace_s = -1;
  EXPECT_FALSE(launch(o, out).ok());
  EXPECT_TRUE(out.str().empty());
}

TEST(Launcher, FreePortIsBindable) {
  auto port = free_port();
  HARP_ASSERT_OK(port);
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(*port));
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  EXPECT_EQ(listen(fd, 1), 0);
  close(fd);
}

}  // namespace
}  // namespace harp::launch

namespace harp {
namespace {

using launch::launch;
using launch::LaunchOptions;
using launch_test::TempDir;
using std::chrono::milliseconds;

// Regression (hardening issue): after `kill -9` of `harp launch`, its workers kept
// training as orphans. They now get the parent-death signal.
TEST(LauncherFaults, KilledLauncherTakesItsWorkersAlong) {
  TempDir dir;
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const std::string script = "echo $$ > " + dir.file("pid.$RANK") + ".tmp && mv " + dir.file("pid.$RANK") +
                               ".tmp " + dir.file("pid.$RANK") + "; exec sleep 60";
    const std::string harp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";
    execl(harp.c_str(), harp.c_str(), "launch", "--nproc", "2", "--", "sh", "-c", script.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(launch_test::wait_for_file(dir.file("pid.0"), milliseconds(10000)));
  ASSERT_TRUE(launch_test::wait_for_file(dir.file("pid.1"), milliseconds(10000)));
  std::vector<pid_t> workers;
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir.file("pid." + std::to_string(r)));
    pid_t pid = 0;
    in >> pid;
    ASSERT_GT(pid, 0);
    workers.push_back(pid);
  }
  kill(launcher, SIGKILL);
  int status = 0;
  waitpid(launcher, &status, 0);
  for (pid_t w : workers) {
    const bool gone = launch_test::process_gone(w, milliseconds(3000));
    if (!gone) kill(w, SIGKILL);
    EXPECT_TRUE(gone) << "worker " << w << " outlived its launcher";
  }
}

// The local rendezvous is a file the launcher made: every worker is told where.
TEST(LauncherFaults, WorkersRendezvousThroughAPrivateFile) {
  TempDir dir;
  LaunchOptions o;
  o.nproc = 2;
  o.command = {"sh", "-c", "echo $HARP_STORE_FILE > " + dir.file("store.$RANK")};
  std::ostringstream out;
  auto r = launch(o, out);
  HARP_ASSERT_OK(r);
  std::ifstream a(dir.file("store.0")), b(dir.file("store.1"));
  std::string sa, sb;
  a >> sa;
  b >> sb;
  EXPECT_FALSE(sa.empty());
  EXPECT_EQ(sa, sb);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(sa).parent_path())) << "removed after the launch";
}

}  // namespace
}  // namespace harp
