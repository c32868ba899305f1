// The local launcher: fork/exec N workers, multiplex their output through poll, and
// stop the whole job when one worker fails. Single-threaded on purpose: one poll loop
// with a short timeout also serves as the clock for reaping and for the SIGTERM ->
// SIGKILL escalation, so there is no SIGCHLD handler and no thread to coordinate.
// Omitted: restarts (torchrun's --max-restarts), multi-node rendezvous.
#include "harp/launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "harp/launch/clock.h"
#include "harp/launch/worker_env.h"
#include "worker_process.h"

extern char** environ;  // NOLINT: POSIX global, needed to hand execvp a new environment

namespace harp::launch {
namespace {

using namespace internal;  // NOLINT: the worker processes this launcher supervises

std::vector<std::string> worker_env(const LaunchOptions& o, int local, int port, const std::string& store,
                                    long long clock_origin_ns) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : o.env) vars[k] = v;
  if (!o.rank_env.empty())
    for (const auto& [k, v] : o.rank_env[local]) vars[k] = v;
  WorkerEnv w;
  w.rank = o.global_rank(local);
  w.local_rank = local;
  w.world_size = o.world_size > 0 ? o.world_size : o.nnodes * o.nproc;
  if (o.store_host != LaunchOptions::kRankZeroHosts) w.store_server = local == o.store_host ? "1" : "0";
  w.local_world_size = o.nproc;
  w.group_rank = o.node_rank;
  w.group_world_size = o.nnodes;
  w.master_addr = o.multi_node() ? o.master_addr : "127.0.0.1";
  w.master_port = std::to_string(port);
  // One machine: rendezvous through a file only this launch knows, so nothing listens
  // for it on any interface (the c10d TCPStore would listen on every one). Across
  // machines: rank 0's TCPStore at MASTER_ADDR:MASTER_PORT, and each rank's own clock.
  w.store_file = store;
  if (!o.multi_node()) w.clock_origin_ns = clock_origin_ns;
  for (const auto& [k, v] : w.to_env()) vars[k] = v;
  std::vector<std::string> env;
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

Status validate(const LaunchOptions& o) {
  if (o.nproc < 1) return invalid_argument("nproc = " + std::to_string(o.nproc) + ": must be at least 1");
  if (o.command.empty() || o.command[0].empty())
    return invalid_argument(
        "no worker command; fix: give it after `--`, e.g. `harp launch --nproc 2 -- ./train`");
  if (!std::isfinite(o.grace_s) || o.grace_s < 0)
    return invalid_argument("grace_s = " + seconds_text(o.grace_s) + ": must be a finite number >= 0");
  for (const auto& kv : o.env)
    if (kv.first.empty() || kv.first.find('=') != std::string::npos)
      return invalid_argument("env key '" + kv.first + "': must be non-empty and contain no '='");
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    return invalid_argument("node_rank = " + std::to_string(o.node_rank) + " with nnodes = " + std::to_string(o.nnodes) +
                            ": a node's rank is 0..nnodes-1; give every machine's launcher its own");
  if (o.multi_node() && (o.master_port < 1 || o.master_port > 65535))
    return invalid_argument("master_port = " + std::to_string(o.master_port) +
                            ": must be a port number 1..65535, the same on every node");
  if (o.multi_node() && o.master_addr.empty())
    return invalid_argument("master_addr is empty: give node 0's address, the same on every node");
  if (!o.rank_prefix.empty() && static_cast<int>(o.rank_prefix.size()) != o.nproc)
    return invalid_argument("rank_prefix has " + std::to_string(o.rank_prefix.size()) + " entries for " +
                            std::to_string(o.nproc) + " ranks: give one per rank or none");
  if (!o.ranks.empty()) {
    if (static_cast<int>(o.ranks.size()) != o.nproc)
      return invalid_argument("ranks has " + std::to_string(o.ranks.size()) + " entries for " +
                              std::to_string(o.nproc) + " workers: give one per worker or none");
    for (int r : o.ranks)
      if (r < 0 || r >= o.world_size)
        return invalid_argument("rank " + std::to_string(r) + " is outside world_size = " +
                                std::to_string(o.world_size) + ": give each worker a rank 0..world_size-1");
  }
  if (!o.rank_env.empty() && static_cast<int>(o.rank_env.size()) != o.nproc)
    return invalid_argument("rank_env has " + std::to_string(o.rank_env.size()) + " entries for " +
                            std::to_string(o.nproc) + " ranks: give one per rank or none");
  return Status();
}

}  // namespace

StatusOr<int> free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error(std::string("free_port: socket() failed: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // the kernel picks an unused ephemeral port
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return io_error("free_port: cannot bind a port on 127.0.0.1: " + why);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

namespace {

// One launch's workers from start to result: start them, then one poll loop that
// forwards their lines, reaps them, passes signals on and escalates SIGTERM to SIGKILL
// on the launcher's clock, then the result.
class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, std::ostream& out)
      : o_(options), out_(out), clock_(options.clock != nullptr ? *options.clock : Clock::system()),
        workers_(options.nproc) {}

  // Starts every worker; on a failure the ones started are killed and reaped (bounded).
  Status start(int port, const std::string& store) {
    const long long clock_origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count();
    for (int r = 0; r < o_.nproc; ++r) {
      workers_[r].rank = o_.global_rank(r);
      std::vector<std::string> argv = o_.rank_prefix.empty() ? std::vector<std::string>() : o_.rank_prefix[r];
      argv.insert(argv.end(), o_.command.begin(), o_.command.end());
      Status s = start_worker(argv, worker_env(o_, r, port, store, clock_origin_ns), &workers_[r]);
      if (!s.ok()) {
        // Bounded cleanup of those already started: SIGKILL cannot be ignored.
        signal_groups(workers_, SIGKILL);
        const double deadline = clock_.now_s() + kReapBound;
        for (Worker& w : workers_) {
          while (w.running && !reap(&w) && clock_.now_s() < deadline) poll(nullptr, 0, kPollMs);
          for (Stream& st : w.streams) close_fd(&st.fd);
        }
        return s;
      }
      if (workers_[r].exec_errno != 0)
        emit_line(r, "harp launch: cannot execute '" + o_.command[0] + "': " + std::strerror(workers_[r].exec_errno),
                  out_);
    }
    return Status();
  }

  // Until every worker is gone (or, past SIGKILL, given up on).
  void supervise() {
    while (true) {
      pump_output();
      reap_and_signal();
      if (finished(clock_.now_s())) break;
    }
    // Children of exited workers may still run (or hold the pipes); a failed job leaves none.
    if (term_at_) signal_groups(workers_, SIGKILL);
    for (Worker& w : workers_)
      for (Stream& s : w.streams) {
        if (!s.pending.empty()) emit_line(w.rank, s.pending, out_);
        close_fd(&s.fd);
      }
    out_.flush();
  }

  LaunchResult result() {
    LaunchResult result;
    const int n = o_.nproc;
    // A worker that ignored SIGTERM for the grace period is stalled: lost as well.
    for (const Worker& w : workers_)
      if (w.got_sigkill && std::find(lost_.begin(), lost_.end(), w.rank) == lost_.end()) lost_.push_back(w.rank);
    result.lost_ranks = lost_;
    if (failed_at_ && all_exited_at_) result.stop_s = *all_exited_at_ - *failed_at_;
    if (forwarded_at_ && all_exited_at_) result.forwarded_s = *all_exited_at_ - *forwarded_at_;
    if (first_failed_ >= 0) {
      const Worker& w = workers_[first_failed_];
      result.exit_code = w.code;
      result.failed_rank = w.rank;
      result.summary = describe_failure(w, o_.command[0]);
      if (n == 2) result.summary += "; stopped the other worker";
      if (n > 2) result.summary += "; stopped the other " + std::to_string(n - 1) + " workers";
    } else if (stop_signal_ != 0) {
      result.exit_code = 128 + stop_signal_;
      result.summary = "the launcher got signal " + std::to_string(stop_signal_) + " (" + strsignal(stop_signal_) +
                       "); stopped all " + std::to_string(n) + " workers";
    } else {
      result.summary = "all " + std::to_string(n) + " workers exited 0";
    }
    const std::string killed = rank_list(workers_, [](const Worker& w) { return w.got_sigkill; });
    if (!killed.empty())
      result.summary +=
          "; " + killed + " still ran " + seconds_text(o_.grace_s) + " s after SIGTERM and got SIGKILL";
    if (unreaped_)
      result.summary += "; " + rank_list(workers_, [](const Worker& w) { return w.running; }) +
                        " did not exit even after SIGKILL";
    return result;
  }

 private:
  // Waits up to kPollMs for output and forwards the complete lines.
  void pump_output() {
    fds_.clear();
    fd_streams_.clear();
    fd_ranks_.clear();
    for (Worker& w : workers_)
      for (Stream& s : w.streams)
        if (s.fd >= 0) {
          fds_.push_back({s.fd, POLLIN, 0});
          fd_streams_.push_back(&s);
          fd_ranks_.push_back(w.rank);
        }
    const int ready = poll(fds_.data(), fds_.size(), kPollMs);
    if (ready > 0)
      for (std::size_t i = 0; i < fds_.size(); ++i)
        if (fds_[i].revents != 0) pump(fd_ranks_[i], fd_streams_[i], out_);
    out_.flush();
  }

  // Notes the first failure (and the ranks killed from outside), passes SIGUSR1 on, and
  // stops everyone on a failure or a stop signal.
  void reap_and_signal() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (!w.running || !reap(&w) || w.code == 0 || term_at_) continue;
      if (first_failed_ < 0) {
        first_failed_ = static_cast<int>(i);
        failed_at_ = clock_.now_s();
      }
      if (w.signal != 0) lost_.push_back(w.rank);  // died before the launcher signalled anyone
    }
    if (!term_at_) {
      const bool usr1 = take_forward_request() && o_.forward_usr1;
      const bool asked = !stop_asked_ && o_.stop_when && o_.stop_when();
      stop_asked_ = stop_asked_ || asked;
      if (usr1 || asked) {
        signal_groups(workers_, SIGUSR1);
        if (!forwarded_at_) forwarded_at_ = clock_.now_s();
      }
    }
    if (!term_at_ && (first_failed_ >= 0 || stop_signal_received() != 0)) {
      if (first_failed_ < 0) stop_signal_ = stop_signal_received();
      signal_groups(workers_, SIGTERM);
      term_at_ = clock_.now_s();
    }
  }

  // SIGKILL after the grace period; true once every worker is gone and its pipes drained
  // (or past SIGKILL's bound).
  bool finished(double now) {
    const bool any_running = std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
    if (term_at_ && !kill_at_ && any_running && now - *term_at_ >= o_.grace_s) {
      signal_groups(workers_, SIGKILL);
      kill_at_ = now;
    }
    if (kill_at_ && any_running && now - *kill_at_ >= kReapBound) {
      unreaped_ = true;  // e.g. stuck in uninterruptible I/O; give up rather than hang
      return true;
    }
    if (any_running) return false;
    if (!all_exited_at_) all_exited_at_ = now;
    const bool any_open = std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) {
      return w.streams[0].fd >= 0 || w.streams[1].fd >= 0;
    });
    // A background grandchild may hold a pipe open forever; its output is not waited for.
    return !any_open || now - *all_exited_at_ >= kDrainBound;
  }

  const LaunchOptions& o_;
  std::ostream& out_;
  Clock& clock_;
  std::vector<Worker> workers_;
  int first_failed_ = -1;
  int stop_signal_ = 0;
  std::optional<double> term_at_, kill_at_, all_exited_at_, failed_at_, forwarded_at_;
  std::vector<int> lost_;
  bool unreaped_ = false;
  bool stop_asked_ = false;  // stop_when returned true
  std::vector<pollfd> fds_;
  std::vector<Stream*> fd_streams_;
  std::vector<int> fd_ranks_;
};

}  // namespace

StatusOr<LaunchResult> launch(const LaunchOptions& options, std::ostream& out) {
  HARP_RETURN_IF_ERROR(validate(options));
  int port = options.master_port;
  if (!options.multi_node()) {
    HARP_ASSIGN_OR_RETURN(port, free_port());
  }
  // A private folder for the rendezvous file, removed when the launch ends.
  std::string store_dir = (std::filesystem::temp_directory_path() / "harp_launch_XXXXXX").string();
  if (mkdtemp(store_dir.data()) == nullptr)
    return io_error("harp launch: cannot create a folder for the rendezvous file: " + std::string(std::strerror(errno)));
  struct RemoveDir {
    std::string path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_store{store_dir};
  const std::string store = options.multi_node() ? std::string() : store_dir + "/store";
  StopSignals stop_signals;
  Supervisor supervisor(options, out);
  HARP_RETURN_IF_ERROR(supervisor.start(port, store));
  supervisor.supervise();
  return supervisor.result();
}

}  // namespace harp::launch
