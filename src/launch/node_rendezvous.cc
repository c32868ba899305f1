// The launchers' meeting (node_rendezvous.h): plain POSIX sockets and one poll loop on
// node 0; a connect-and-ask loop on the others. Everything is bounded by the meeting's
// timeout; node 0 closes its listening socket before it answers anyone, and lets each
// launcher close first, so the port is free for rank 0's store at once.
#include "harp/launch/node_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "harp/common/format.h"
#include "harp/common/parse.h"
#include "harp/common/sha256.h"
#include "harp/launch/worker_env.h"

namespace harp::launch {
namespace {

constexpr size_t kMaxLine = 512;
constexpr int kProtocol = 1;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string token_of(const std::string& secret) {
  return secret.empty() ? "-" : sha256_hex("harp-launch/" + secret).substr(0, 32);
}

std::string where(const NodeMeeting& m) { return m.master_addr + ":" + std::to_string(m.master_port); }

void send_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the peer is gone: it learns nothing more from us
    sent += static_cast<size_t>(n);
  }
}

// Reads into *buf until a newline, EOF, an error, kMaxLine bytes or the deadline. The
// line without its newline, or nullopt.
std::optional<std::string> read_line(int fd, std::string* buf, double deadline) {
  while (true) {
    const auto nl = buf->find('\n');
    if (nl != std::string::npos) return buf->substr(0, nl);
    if (buf->size() > kMaxLine) return std::nullopt;
    const double left = deadline - now_s();
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min(left, 0.2) * 1000) + 1);
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready <= 0) continue;
    char chunk[256];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return std::nullopt;
    buf->append(chunk, static_cast<size_t>(n));
  }
}

std::string join(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

// Node 0: the listening side.
class Host {
 public:
  explicit Host(const NodeMeeting& m) : m_(m), nprocs_(static_cast<size_t>(m.nnodes), 0), fds_(nprocs_.size(), -1) {
    nprocs_[0] = m.nproc;
  }
  ~Host() {
    close_fd(&listener_);
    for (auto& c : pending_) close_fd(&c.fd);
    for (int& fd : fds_) close_fd(&fd);
  }

  StatusOr<NodeRanks> run() {
    HARP_RETURN_IF_ERROR(listen_on_port());
    const double start = now_s(), deadline = start + m_.timeout_s;
    double next_note = start + m_.progress_every_s;
    while (missing().size() > 0) {
      const double now = now_s();
      if (now >= deadline)
        return fail("node 0 waited " + fmt("%g", m_.timeout_s) + " s at " + where(m_) + " for node(s) " +
                    join(missing(), ", ") + " of " + std::to_string(m_.nnodes) +
                    "; fix: start their launchers with the same --nnodes, --master-addr and --master-port");
      if (m_.progress && now >= next_note) {
        m_.progress("waiting at " + where(m_) + " for node(s) " + join(missing(), ", ") + " of " +
                    std::to_string(m_.nnodes) + " (" + fmt("%.0f", now - start) + " s)");
        next_note = now + m_.progress_every_s;
      }
      HARP_RETURN_IF_ERROR(poll_once(std::min(0.2, deadline - now)));
      if (!fatal_.empty()) return fail(fatal_);
    }
    // Everyone is here: the port goes first, then the answers.
    close_fd(&listener_);
    NodeRanks out;
    out.nprocs = nprocs_;
    const std::vector<int> firsts = first_ranks(nprocs_);
    out.world_size = firsts.back();
    out.first_rank = 0;
    for (int r = 1; r < m_.nnodes; ++r)
      send_line(fds_[r], "ok " + std::to_string(firsts[r]) + " " + std::to_string(out.world_size) + " " +
                             join(nprocs_, ","));
    // Each launcher closes first (its end keeps the TIME_WAIT), within a bound.
    const double bound = now_s() + 5;
    for (int r = 1; r < m_.nnodes; ++r) {
      std::string rest;
      while (read_line(fds_[r], &rest, bound)) rest.clear();
      close_fd(&fds_[r]);
    }
    return out;
  }

 private:
  struct Pending {
    int fd = -1;
    std::string buf, peer;
  };

  static void close_fd(int* fd) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }

  std::vector<int> missing() const {
    std::vector<int> out;
    for (int r = 1; r < m_.nnodes; ++r)
      if (fds_[r] < 0) out.push_back(r);
    return out;
  }

  Status listen_on_port() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listener_ < 0) return io_error(std::string("harp launch: socket() failed: ") + std::strerror(errno));
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);  // as rank 0's store will: every interface
    addr.sin_port = htons(static_cast<uint16_t>(m_.master_port));
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener_, 64) != 0)
      return failed_precondition("harp launch: node 0 cannot listen on port " + std::to_string(m_.master_port) +
                                 " (" + std::strerror(errno) + "); fix: give every launcher a free --master-port");
    return Status();
  }

  Status poll_once(double wait_s) {
    std::vector<pollfd> p = {{listener_, POLLIN, 0}};
    for (const auto& c : pending_) p.push_back({c.fd, POLLIN, 0});
    const int ready = ::poll(p.data(), p.size(), static_cast<int>(std::max(0.0, wait_s) * 1000) + 1);
    if (ready < 0 && errno != EINTR) return io_error(std::string("harp launch: poll failed: ") + std::strerror(errno));
    if (ready <= 0) return Status();
    for (size_t i = p.size(); i-- > 1;)
      if (p[i].revents != 0) serve(i - 1);
    if (p[0].revents & POLLIN) accept_all();
    return Status();
  }

  void accept_all() {
    while (true) {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      const int fd = ::accept4(listener_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (fd < 0) return;
      char text[INET_ADDRSTRLEN] = "?";
      ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
      pending_.push_back({fd, "", text});
    }
  }

  // A pending connection has something (or closed): read its line, register or drop it.
  void serve(size_t i) {
    Pending& c = pending_[i];
    char chunk[256];
    const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n > 0) c.buf.append(chunk, static_cast<size_t>(n));
    const auto nl = c.buf.find('\n');
    if (n <= 0 || (nl == std::string::npos && c.buf.size() > kMaxLine)) return drop(i, "");
    if (nl == std::string::npos) return;
    std::istringstream in(c.buf.substr(0, nl));
    std::string magic, token;
    long long version = 0, nnodes = 0, node = -1, nproc = 0;
    if (!(in >> magic >> version >> token >> nnodes >> node >> nproc) || magic != "harp-launch" ||
        version != kProtocol || nproc < 1 || nproc > (1 << 20))
      return drop(i, "error not a harp launch " + std::to_string(kProtocol) + " request");
    if (token != token_of(m_.secret))
      return drop(i, "error HARP_RENDEZVOUS_SECRET differs from node 0's; fix: give every launcher the same one");
    const std::string who = "the launcher at " + c.peer + " (--node-rank " + std::to_string(node) + ")";
    if (nnodes != m_.nnodes)
      fatal_ = who + " says --nnodes " + std::to_string(nnodes) + ", node 0 says " + std::to_string(m_.nnodes) +
               "; fix: give every launcher the same --nnodes";
    else if (node < 0 || node >= m_.nnodes)
      fatal_ = who + ": a node's rank is 0.." + std::to_string(m_.nnodes - 1);
    else if (node == 0 || fds_[node] >= 0)
      fatal_ = "two launchers say --node-rank " + std::to_string(node) + " (one of them " + c.peer +
               "); fix: give each machine its own node rank 0.." + std::to_string(m_.nnodes - 1);
    if (!fatal_.empty()) {
      send_line(c.fd, "error " + fatal_);
      return drop(i, "");
    }
    fds_[node] = c.fd;
    nprocs_[node] = static_cast<int>(nproc);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void drop(size_t i, const std::string& reply) {
    if (!reply.empty()) {
      send_line(pending_[i].fd, reply);
      if (m_.progress) m_.progress("dropped a connection from " + pending_[i].peer + ": " + reply.substr(6));
    }
    close_fd(&pending_[i].fd);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // Tells every launcher heard from, then returns the error.
  Status fail(const std::string& why) {
    for (int r = 1; r < m_.nnodes; ++r)
      if (fds_[r] >= 0) send_line(fds_[r], "error " + why);
    for (auto& c : pending_) send_line(c.fd, "error " + why);
    return failed_precondition("harp launch: " + why);
  }

  const NodeMeeting& m_;
  int listener_ = -1;
  std::vector<int> nprocs_, fds_;  // by node rank; fds_[0] unused
  std::vector<Pending> pending_;   // connected, not yet heard
  std::string fatal_;
};

// A connected socket to node 0 before the deadline, or -1.
int connect_once(const NodeMeeting& m, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(m.master_addr.c_str(), std::to_string(m.master_port).c_str(), &hints, &found);
  if (rc != 0) {
    *why = std::string("cannot resolve it: ") + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {  // bounded: a host that does not answer is tried again later
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      err = ::poll(&p, 1, 2000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : ETIMEDOUT;
    }
    if (err != 0) {
      *why = std::strerror(err);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

StatusOr<NodeRanks> join_node0(const NodeMeeting& m) {
  const double start = now_s(), deadline = start + m.timeout_s;
  double next_note = start + m.progress_every_s;
  std::string why;
  int fd = -1;
  while ((fd = connect_once(m, &why)) < 0) {
    const double now = now_s();
    if (now >= deadline)
      return failed_precondition("harp launch: node " + std::to_string(m.node_rank) + " found no launcher of node 0 at " +
                                 where(m) + " within " + fmt("%g", m.timeout_s) + " s (" + why +
                                 "); fix: start node 0's launcher (--node-rank 0) with the same --master-addr and "
                                 "--master-port");
    if (m.progress && now >= next_note) {
      m.progress("waiting for node 0 at " + where(m) + " (" + why + ", " + fmt("%.0f", now - start) + " s)");
      next_note = now + m.progress_every_s;
    }
    ::usleep(100 * 1000);
  }
  send_line(fd, "harp-launch " + std::to_string(kProtocol) + " " + token_of(m.secret) + " " +
                    std::to_string(m.nnodes) + " " + std::to_string(m.node_rank) + " " + std::to_string(m.nproc));
  std::string buf;
  const auto line = read_line(fd, &buf, deadline);
  ::close(fd);  // this end closes first
  if (!line)
    return failed_precondition("harp launch: node 0's launcher at " + where(m) +
                               " did not answer (it stopped, or the wait ran past the timeout); see its output");
  if (line->rfind("error ", 0) == 0) return failed_precondition("harp launch: " + line->substr(6));
  std::istringstream in(*line);
  std::string ok, list;
  NodeRanks out;
  if (in >> ok >> out.first_rank >> out.world_size >> list && ok == "ok") {
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      auto n = parse_integer(item, 1, 1 << 20);
      if (!n.ok()) break;
      out.nprocs.push_back(static_cast<int>(*n));
    }
    const std::vector<int> firsts = first_ranks(out.nprocs);
    if (static_cast<int>(out.nprocs.size()) == m.nnodes && out.nprocs[m.node_rank] == m.nproc &&
        firsts[m.node_rank] == out.first_rank && firsts.back() == out.world_size)
      return out;
  }
  return failed_precondition("harp launch: node 0 at " + where(m) + " answered '" + line->substr(0, 80) +
                             "', not a harp launch " + std::to_string(kProtocol) + " answer; is another program on the port?");
}

}  // namespace

std::vector<int> first_ranks(const std::vector<int>& nprocs) {
  std::vector<int> out = {0};
  for (int n : nprocs) out.push_back(out.back() + n);
  return out;
}

StatusOr<NodeRanks> meet_nodes(const NodeMeeting& m) {
  if (m.nnodes < 1 || m.node_rank < 0 || m.node_rank >= m.nnodes || m.nproc < 1)
    return invalid_argument("harp launch: --node-rank " + std::to_string(m.node_rank) + " of --nnodes " +
                            std::to_string(m.nnodes) + " with --nproc " + std::to_string(m.nproc) +
                            ": a node's rank is 0..nnodes-1 and it runs at least one worker");
  if (m.nnodes == 1) return NodeRanks{0, m.nproc, {m.nproc}};
  if (!is_loopback_address(m.master_addr) && m.secret.size() < 16)
    return failed_precondition(
        "harp launch: --master-addr " + m.master_addr.substr(0, 80) +
        " is not this machine: set HARP_RENDEZVOUS_SECRET (16+ characters, the same for every launcher, e.g. "
        "`export HARP_RENDEZVOUS_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')`)");
  if (m.node_rank == 0) return Host(m).run();
  return join_node0(m);
}

}  // namespace harp::launch
