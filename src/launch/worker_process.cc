// The worker processes of a local launch (see worker_process.h).
#include "worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <sstream>

namespace harp::launch::internal {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }
volatile std::sig_atomic_t g_forward_pending = 0;  // SIGUSR1s not yet passed on
void on_forward_signal(int) { g_forward_pending = 1; }

}  // namespace

int stop_signal_received() { return g_stop_signal; }

bool take_forward_request() {
  if (g_forward_pending == 0) return false;
  g_forward_pending = 0;
  return true;
}

StopSignals::StopSignals() {
  g_stop_signal = 0;
  g_forward_pending = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll must wake up with EINTR
  for (int i = 0; i < kCount; ++i) {
    sa.sa_handler = kSignals[i] == SIGUSR1 ? on_forward_signal : on_stop_signal;
    installed_[i] = sigaction(kSignals[i], nullptr, &old_[i]) == 0 && old_[i].sa_handler != SIG_IGN &&
                    sigaction(kSignals[i], &sa, nullptr) == 0;
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kCount; ++i)
    if (installed_[i]) sigaction(kSignals[i], &old_[i], nullptr);
}

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> ptrs;
  for (auto& s : strings) ptrs.push_back(s.data());
  ptrs.push_back(nullptr);
  return ptrs;
}

// Forks one worker. On success w->pid is set and its two output pipes are open; a failed
// execvp is recorded in w->exec_errno (the child then exits 127).
Status start_worker(std::vector<std::string> argv, std::vector<std::string> env, Worker* w) {
  // O_CLOEXEC everywhere: later workers must not inherit earlier workers' pipes, or
  // EOF would never arrive while any sibling lives.
  int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, exec_p[2] = {-1, -1};
  if (pipe2(out_p, O_CLOEXEC) != 0 || pipe2(err_p, O_CLOEXEC) != 0 || pipe2(exec_p, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    for (int* fd : {&out_p[0], &out_p[1], &err_p[0], &err_p[1], &exec_p[0], &exec_p[1]}) close_fd(fd);
    return io_error("harp launch: cannot create pipes for rank " + std::to_string(w->rank) + ": " + why);
  }
  // Everything the child needs is built before fork: after fork only async-signal-safe
  // calls are allowed if the parent has threads.
  std::vector<char*> argv_c = c_strings(argv);
  std::vector<char*> env_c = c_strings(env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    for (int* fd : {&out_p[0], &out_p[1], &err_p[0], &err_p[1], &exec_p[0], &exec_p[1]}) close_fd(fd);
    return io_error("harp launch: fork failed for rank " + std::to_string(w->rank) + ": " + why);
  }
  if (pid == 0) {
    setpgid(0, 0);
    // Die with the launcher, even when it is killed with SIGKILL (no orphans); the
    // setting survives exec. If the launcher died before this line, leave at once.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(out_p[1], STDOUT_FILENO);
    dup2(err_p[1], STDERR_FILENO);
    environ = env_c.data();
    execvp(argv_c[0], argv_c.data());
    const int e = errno;
    ssize_t ignored = write(exec_p[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  // Both parent and child call setpgid so the group exists before either side relies
  // on it; the parent's call fails harmlessly once the child has exec'd.
  setpgid(pid, pid);
  close_fd(&out_p[1]);
  close_fd(&err_p[1]);
  close_fd(&exec_p[1]);
  w->pid = pid;
  w->running = true;
  w->streams[0].fd = out_p[0];
  w->streams[1].fd = err_p[0];
  // Returns at once: exec closes the pipe (CLOEXEC) or the child writes errno and exits.
  int e = 0;
  ssize_t n;
  do {
    n = read(exec_p[0], &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof e)) w->exec_errno = e;
  close_fd(&exec_p[0]);
  return Status();
}

void emit_line(int rank, const std::string& line, std::ostream& out) {
  out << "[rank " << rank << "] " << line << "\n";
}

// Reads what is available; at EOF flushes a last partial line and closes the pipe.
void pump(int rank, Stream* s, std::ostream& out) {
  char buf[65536];
  const ssize_t n = read(s->fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    if (!s->pending.empty()) emit_line(rank, s->pending, out);
    s->pending.clear();
    close_fd(&s->fd);
    return;
  }
  s->pending.append(buf, static_cast<std::size_t>(n));
  std::size_t start = 0, nl;
  while ((nl = s->pending.find('\n', start)) != std::string::npos) {
    emit_line(rank, s->pending.substr(start, nl - start), out);
    start = nl + 1;
  }
  s->pending.erase(0, start);
  if (s->pending.size() > kMaxLineBytes) {
    emit_line(rank, s->pending, out);
    s->pending.clear();
  }
}

void signal_groups(std::vector<Worker>& workers, int sig) {
  // The whole group, also for workers that already exited: their children may live on.
  for (Worker& w : workers) {
    if (w.pid <= 0) continue;
    kill(-w.pid, sig);
    if (sig == SIGKILL && w.running) w.got_sigkill = true;
  }
}

// Returns true if w has just exited.
bool reap(Worker* w) {
  int st = 0;
  const pid_t r = waitpid(w->pid, &st, WNOHANG);
  if (r != w->pid) return false;
  w->running = false;
  if (WIFSIGNALED(st)) {
    w->signal = WTERMSIG(st);
    w->code = 128 + w->signal;
  } else {
    w->code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  return true;
}

std::string describe_failure(const Worker& w, const std::string& cmd) {
  std::string s = "rank " + std::to_string(w.rank);
  if (w.exec_errno != 0)
    return s + " could not execute '" + cmd + "': " + std::strerror(w.exec_errno) + " (exit code 127)";
  if (w.signal != 0)
    return s + " was killed by signal " + std::to_string(w.signal) + " (" + strsignal(w.signal) +
           ", exit code " + std::to_string(w.code) + ")";
  return s + " exited with code " + std::to_string(w.code);
}

// "rank 2" or "ranks 0,3"; empty if none is picked.
std::string rank_list(const std::vector<Worker>& workers, bool (*pick)(const Worker&)) {
  std::string s;
  int count = 0;
  for (const Worker& w : workers)
    if (pick(w)) s += (count++ == 0 ? "" : ",") + std::to_string(w.rank);
  return count == 0 ? s : (count == 1 ? "rank " : "ranks ") + s;
}

std::string seconds_text(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace harp::launch::internal
