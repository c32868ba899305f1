// The worker processes of a local launch (launcher.cc's Supervisor drives them): start
// one with its own process group and output pipes, forward its complete lines, reap it,
// signal the groups, and describe how one ended. Private to src/launch.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <ostream>
#include <signal.h>
#include <string>
#include <vector>

#include "harp/common/status.h"

namespace harp::launch::internal {

constexpr int kPollMs = 20;          // reaping latency
constexpr double kReapBound = 5.0;    // seconds, after SIGKILL
constexpr double kDrainBound = 0.5;   // seconds, pipes held by grandchildren
constexpr std::size_t kMaxLineBytes = 64 * 1024;           // progress bars without '\n'

// The stop signal (SIGINT, SIGTERM, SIGHUP) received while StopSignals is installed, or 0.
int stop_signal_received();
// True once per SIGUSR1 received since the last call (it is passed on to the workers).
bool take_forward_request();

// SIGUSR1 is passed on to the workers (harp train: stop after the next checkpoint).
// Without this, Ctrl-C (or a closed terminal) would end the launcher and leave the
// workers, in their own process groups and so untouched by the terminal, as orphans.
// A signal the caller ignores (e.g. SIGINT of a background job in a script) stays ignored.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr int kCount = 4;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
  struct sigaction old_[kCount] {};
  bool installed_[kCount] = {};
};

void close_fd(int* fd);

struct Stream {
  int fd = -1;
  std::string pending;  // bytes after the last '\n'
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  Stream streams[2];  // stdout, stderr: separate pipes so the two never split a line
  int exec_errno = 0;
  int code = 0;    // exit status, or 128 + signal
  int signal = 0;  // the signal that ended it, 0 if it exited
  bool got_sigkill = false;
};

// argv/envp for execvp: pointers into `strings`, then nullptr.
std::vector<char*> c_strings(std::vector<std::string>& strings);
// Forks one worker. On success w->pid is set and its two output pipes are open; a failed
// execvp is recorded in w->exec_errno (the child then exits 127).
Status start_worker(std::vector<std::string> argv, std::vector<std::string> env, Worker* w);
void emit_line(int rank, const std::string& line, std::ostream& out);
// Reads what is available; at EOF flushes a last partial line and closes the pipe.
void pump(int rank, Stream* s, std::ostream& out);
void signal_groups(std::vector<Worker>& workers, int sig);
// Returns true if w has just exited.
bool reap(Worker* w);
std::string describe_failure(const Worker& w, const std::string& cmd);
// "rank 2" or "ranks 0,3"; empty if none is picked.
std::string rank_list(const std::vector<Worker>& workers, bool (*pick)(const Worker&));
std::string seconds_text(double s);

}  // namespace harp::launch::internal
