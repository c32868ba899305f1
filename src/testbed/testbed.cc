#include "harp/testbed/testbed.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "harp/common/document.h"
#include "harp/launch/worker_env.h"

extern char** environ;  // NOLINT: POSIX global

namespace harp::testbed {
namespace {

constexpr int kMaxHosts = 64;  // a full mesh: 2016 veth pairs at most
constexpr std::size_t kMaxOutput = 1 << 20;
constexpr int kMtu = 1500;  // the veths' (Linux's default)

std::string format_double(double v) {
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

std::string address_of(int host) {
  return "10.99." + std::to_string(host / 250) + "." + std::to_string(host % 250 + 1);
}

}  // namespace

double wire_rate_factor() {
  // A full-size frame on the veth (what htb counts) against the TCP payload it carries:
  // MTU 1500 + 14 bytes of Ethernet header, less 20 (IP) and 32 (TCP with timestamps).
  return (kMtu + 14.0) / (kMtu - 52.0);
}

int gso_segments(const cluster::Link& link, double packet_us) {
  const double frames = link.bandwidth_gbps * 1e9 / 8 * packet_us * 1e-6 / (kMtu + 14.0);
  return static_cast<int>(std::clamp(std::round(frames), 1.0, 64.0));
}

namespace {

// The commands that shape one veth end. netem delays each packet by the latency and
// paces it to the rate; htb only paces (a kernel without sch_netem, as on the CI
// machines, keeps the veth's own latency, tens of microseconds). htb rather than tbf:
// tbf's bucket must hold the largest packet the veth hands it, and a full bucket lets
// that much through at once.
// The rate a link is shaped to (tc's text): the cluster file's bandwidth is what a
// transfer achieves (what `harp profile links` measures), the wire rate carries the
// headers on top of it.
std::string shaped_rate(const cluster::Link& link) {
  return std::to_string(std::llround(link.bandwidth_gbps * 1e9 * wire_rate_factor())) + "bit";
}

// netem's qdisc arguments after "root" (delay and rate).
std::vector<std::string> netem_args(const cluster::Link& link) {
  return {"netem", "delay", std::to_string(std::llround(link.latency_s * 1e6)) + "us", "rate", shaped_rate(link),
          "limit", "100000"};
}

// htb's class arguments after "classid 1:1". A bucket of 50 us at the rate (at least 1
// byte; tc reads 0 as "unset" and makes it one frame). A packet leaves when the class is
// out of debt and its length is then charged, so a message crosses at most one frame plus
// the bucket early. Without a bucket a late wake-up of htb's timer is never made up: 10-20
// us a packet on this VM, +17-22% at 0.1 Gbit/s (8,600 packets/s); a bucket of one frame
// let a 16 KiB message arrive two frames early (12.2 ms for 13.1 at 10 Mbit/s). One FIFO
// at the link's rate, as a bottleneck queue is: the other direction's data and this
// direction's ACKs wait in it alike. The quantum only divides a surplus among classes
// (there is one); set, it keeps htb from warning that the default (rate / 10) is too big.
std::vector<std::string> htb_class_args(const cluster::Link& link) {
  const std::string burst = std::to_string(
      std::max<long long>(1, std::llround(link.bandwidth_gbps * 1e9 * wire_rate_factor() / 8 * 50e-6)));
  return {"htb", "rate", shaped_rate(link), "burst", burst, "cburst", burst, "quantum", "60000"};
}

// A GSO packet is shaped as one: the veth end's packets carry as many segments as the
// link sends in packet_us (gso_segments).
std::vector<std::string> gso_command(const std::string& netns, const std::string& dev, const cluster::Link& link,
                                     double packet_us) {
  return {"ip", "-n", netns, "link", "set", dev, "gso_max_segs", std::to_string(gso_segments(link, packet_us))};
}

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// netem both delays and paces to the rate; htb only paces (a kernel without sch_netem, as
// on the CI machines, keeps the veth's own latency, tens of microseconds). htb rather than
// tbf: tbf's bucket must hold the largest packet the veth hands it, and a full bucket lets
// that much through at once.
std::vector<std::vector<std::string>> shape_commands(const std::string& netns, const std::string& dev,
                                                     const cluster::Link& link, Shaper shaper) {
  const std::vector<std::string> tc = {"tc", "-n", netns};
  if (shaper == Shaper::kNetem) return {joined(joined(tc, {"qdisc", "replace", "dev", dev, "root"}), netem_args(link))};
  // htb cannot be replaced in place: the old root goes first (that fails harmlessly when
  // there is none, and up() lets it); set_link changes the class instead.
  return {joined(tc, {"qdisc", "del", "dev", dev, "root"}),
          joined(tc, {"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"}),
          joined(joined(tc, {"class", "replace", "dev", dev, "parent", "1:", "classid", "1:1"}), htb_class_args(link))};
}

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

}  // namespace

int Topology::host_of_device(int device) const {
  for (int h = 0; h < static_cast<int>(hosts.size()); ++h)
    if (std::find(hosts[h].devices.begin(), hosts[h].devices.end(), device) != hosts[h].devices.end()) return h;
  return -1;
}

std::string default_prefix(const cluster::Cluster& cluster) { return "harp" + cluster.fingerprint().substr(0, 6); }

Status check_prefix(const std::string& prefix) {
  bool ok = !prefix.empty() && prefix.size() <= 24;
  for (char c : prefix) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
  if (!ok)
    return invalid_argument("testbed prefix '" + prefix.substr(0, 40) +
                            "': must be 1-24 characters of [a-z0-9] (it names the namespaces); e.g. harptest");
  return Status();
}

StatusOr<Topology> topology_for(const cluster::Cluster& cluster, const std::string& given_prefix, double packet_us) {
  const std::string prefix = given_prefix.empty() ? default_prefix(cluster) : given_prefix;
  HARP_RETURN_IF_ERROR(check_prefix(prefix));
  Topology t;
  t.prefix = prefix;
  t.packet_us = packet_us;
  int hosts = 0;
  for (const auto& sc : cluster.subclusters) hosts += sc.nodes > 1 ? sc.nodes : 1;
  if (hosts > kMaxHosts)
    return invalid_argument("cluster '" + cluster.name + "': the testbed would need " + std::to_string(hosts) +
                            " namespaces (one per node), more than " + std::to_string(kMaxHosts) +
                            "; emulate a smaller cluster (fewer nodes per subcluster)");
  for (int s = 0; s < static_cast<int>(cluster.subclusters.size()); ++s) {
    const auto& sc = cluster.subclusters[s];
    const int first = cluster.first_device_id(s);
    const int per_host = sc.nodes > 1 ? sc.devices_per_node : sc.num_devices();
    for (int n = 0; n < (sc.nodes > 1 ? sc.nodes : 1); ++n) {
      Host h;
      const int index = static_cast<int>(t.hosts.size());
      h.netns = prefix + "-h" + std::to_string(index);
      h.address = address_of(index);
      h.subcluster = s;
      h.node = sc.nodes > 1 ? n : -1;
      for (int d = 0; d < per_host; ++d) h.devices.push_back(first + n * per_host + d);
      t.hosts.push_back(std::move(h));
    }
  }
  for (int a = 0; a < static_cast<int>(t.hosts.size()); ++a) {
    for (int b = a + 1; b < static_cast<int>(t.hosts.size()); ++b) {
      const Host& ha = t.hosts[a];
      const Host& hb = t.hosts[b];
      Wire w;
      w.a = a;
      w.b = b;
      const auto& sa = cluster.subclusters[ha.subcluster];
      if (ha.subcluster == hb.subcluster) {
        w.link = sa.inter_node;
        w.rule = "inter-node link of " + sa.name;
      } else {
        std::string path;
        w.link = cluster.path_link(ha.subcluster, hb.subcluster, &path);
        w.rule = cluster.link_between(ha.subcluster, hb.subcluster)
                     ? "link " + path
                     : "path " + path + " (slowest bandwidth, summed latency)";
      }
      t.wires.push_back(std::move(w));
    }
  }
  return t;
}

std::vector<std::string> netns_add_command(const Host& host) { return {"ip", "netns", "add", host.netns}; }

std::vector<std::string> veth_add_command(const Topology& t, const Wire& w) {
  return {"ip",   "link", "add",  Topology::veth_name(w.b), "netns", t.hosts[w.a].netns, "type", "veth", "peer",
          "name", Topology::veth_name(w.a), "netns", t.hosts[w.b].netns};
}

const char* shaper_name(Shaper shaper) { return shaper == Shaper::kNetem ? "netem" : "htb"; }

std::vector<std::vector<std::string>> up_commands(const Topology& t, Shaper shaper) {
  std::vector<std::vector<std::string>> cmds;
  for (const Host& h : t.hosts) {
    cmds.push_back({"ip", "-n", h.netns, "link", "set", "lo", "up"});
    cmds.push_back({"ip", "-n", h.netns, "addr", "replace", h.address + "/32", "dev", "lo"});
  }
  for (const Wire& w : t.wires) {
    for (int side = 0; side < 2; ++side) {
      const Host& from = t.hosts[side == 0 ? w.a : w.b];
      const Host& to = t.hosts[side == 0 ? w.b : w.a];
      const std::string dev = Topology::veth_name(side == 0 ? w.b : w.a);
      cmds.push_back(gso_command(from.netns, dev, w.link, t.packet_us));
      cmds.push_back({"ip", "-n", from.netns, "link", "set", dev, "up"});
      // CUBIC on the route, not the machine's default (BBR here): BBR sizes its window
      // to the bandwidth x the least round trip it saw (a few frames on an idle
      // veth), so while the other direction's data queued in front of its ACKs, a
      // sender stalled: messages sent both ways at once took up to +78% (16 KiB at
      // 0.01 Gbit/s). CUBIC's window keeps growing without loss, as a fabric without
      // TCP (NCCL over InfiniBand) would not stall either: within 9% (docs/testbed.md).
      cmds.push_back({"ip", "-n", from.netns, "route", "replace", to.address + "/32", "dev", dev, "src", from.address,
                      "congctl", "cubic"});
      for (auto& c : shape_commands(from.netns, dev, w.link, shaper)) cmds.push_back(std::move(c));
    }
  }
  return cmds;
}

StatusOr<std::string> run_command(const std::vector<std::string>& argv) {
  if (argv.empty()) return invalid_argument("run_command: no command");
  int out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
  if (pipe2(out_p, O_CLOEXEC) != 0 || pipe2(err_p, O_CLOEXEC) != 0) {
    for (int* fd : {&out_p[0], &out_p[1], &err_p[0], &err_p[1]}) close_fd(fd);
    return io_error(std::string("cannot create pipes: ") + std::strerror(errno));
  }
  std::vector<std::string> args = argv;
  std::vector<char*> c_args;
  for (auto& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    for (int* fd : {&out_p[0], &out_p[1], &err_p[0], &err_p[1]}) close_fd(fd);
    return io_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    dup2(out_p[1], STDOUT_FILENO);
    dup2(err_p[1], STDERR_FILENO);
    execvp(c_args[0], c_args.data());
    const char msg[] = "cannot execute\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
  }
  close_fd(&out_p[1]);
  close_fd(&err_p[1]);
  std::string out, err;
  pollfd fds[2] = {{out_p[0], POLLIN, 0}, {err_p[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
        continue;
      }
      std::string& dst = i == 0 ? out : err;
      if (dst.size() < kMaxOutput) dst.append(buf, static_cast<std::size_t>(n));
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return out;
  std::string first = err.substr(0, err.find('\n'));
  if (first.empty()) first = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status)) : "killed";
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  return io_error("`" + line.substr(0, 200) + "` failed: " + first.substr(0, 300));
}

StatusOr<std::vector<std::string>> namespaces_with_prefix(const std::string& prefix) {
  HARP_RETURN_IF_ERROR(check_prefix(prefix));
  HARP_ASSIGN_OR_RETURN(std::string listing, run_command({"ip", "netns", "list"}));
  std::vector<std::string> names;
  std::istringstream in(listing);
  for (std::string line; std::getline(in, line);) {
    const std::string name = line.substr(0, line.find(' '));  // "name (id: 3)"
    if (name.rfind(prefix + "-", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status available() {
  if (geteuid() != 0)
    return failed_precondition("the testbed needs root (network namespaces, veth, tc); this process runs as uid " +
                               std::to_string(geteuid()));
  for (const char* tool : {"ip", "tc"}) {
    auto r = run_command({tool, "-V"});
    if (!r.ok())
      return failed_precondition(std::string("the testbed needs `") + tool +
                                 "` (Debian package iproute2): " + r.status().message());
  }
  const std::string probe = "harpprobe" + std::to_string(getpid() % 100000);
  auto made = run_command({"ip", "netns", "add", probe + "-p"});
  if (!made.ok()) return failed_precondition("cannot create a network namespace here: " + made.status().message());
  auto removed = run_command({"ip", "netns", "del", probe + "-p"});
  if (!removed.ok()) return removed.status();
  return Status();
}

Status up(const Topology& t) {
  HARP_ASSIGN_OR_RETURN(std::vector<std::string> existing, namespaces_with_prefix(t.prefix));
  clear_device_slowdowns(t.prefix);  // up puts the cluster file's figures back
  std::set<std::string> wanted;
  for (const Host& h : t.hosts) wanted.insert(h.netns);
  auto fail = [&](const Status& s) {
    auto ignored = down(t.prefix);
    (void)ignored;
    return s;
  };
  for (const std::string& ns : existing)
    if (!wanted.count(ns)) {
      auto r = run_command({"ip", "netns", "del", ns});
      if (!r.ok()) return fail(r.status());
    }
  const std::set<std::string> have(existing.begin(), existing.end());
  for (const Host& h : t.hosts)
    if (!have.count(h.netns)) {
      auto r = run_command(netns_add_command(h));
      if (!r.ok()) return fail(r.status());
    }
  for (const Wire& w : t.wires) {
    if (run_command({"ip", "-n", t.hosts[w.a].netns, "link", "show", Topology::veth_name(w.b)}).ok()) continue;
    auto r = run_command(veth_add_command(t, w));
    if (!r.ok()) return fail(r.status());
  }
  // netem where the kernel has it (it shapes latency too), else htb.
  Shaper shaper = Shaper::kHtb;
  if (!t.wires.empty()) {
    const Wire& w = t.wires.front();
    const auto probe = shape_commands(t.hosts[w.a].netns, Topology::veth_name(w.b), w.link, Shaper::kNetem);
    if (run_command(probe.front()).ok()) shaper = Shaper::kNetem;
  }
  for (const auto& cmd : up_commands(t, shaper)) {
    auto r = run_command(cmd);
    const bool removal = cmd.size() > 4 && cmd[3] == "qdisc" && cmd[4] == "del";
    if (!r.ok() && !removal) return fail(r.status());
  }
  return Status();
}

Status set_device_slowdown(const std::string& prefix, const std::string& subcluster, double factor) {
  std::error_code ec;
  std::filesystem::create_directories(launch::testbed_slowdown_dir(prefix), ec);
  if (ec) return io_error(launch::testbed_slowdown_dir(prefix) + ": cannot create: " + ec.message());
  const std::string file = launch::testbed_slowdown_file(prefix, subcluster);
  if (factor == 1.0) {
    std::filesystem::remove(file, ec);
    return Status();
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.17g\n", factor);
  return write_text_file_atomic(file, text);
}

void clear_device_slowdowns(const std::string& prefix) {
  std::error_code ec;
  std::filesystem::remove_all(launch::testbed_slowdown_dir(prefix), ec);
}

StatusOr<int> set_link(Topology* t, int a, int b, std::optional<double> bandwidth_gbps,
                       std::optional<double> latency_s) {
  int changed = 0;
  for (Wire& w : t->wires) {
    const int sa = t->hosts[w.a].subcluster, sb = t->hosts[w.b].subcluster;
    if (!((sa == a && sb == b) || (sa == b && sb == a))) continue;
    cluster::Link link = w.link;
    if (bandwidth_gbps) link.bandwidth_gbps = *bandwidth_gbps;
    if (latency_s) link.latency_s = *latency_s;
    for (int side = 0; side < 2; ++side) {
      const Host& from = t->hosts[side == 0 ? w.a : w.b];
      const std::string dev = Topology::veth_name(side == 0 ? w.b : w.a);
      const std::vector<std::string> tc = {"tc", "-n", from.netns};
      HARP_ASSIGN_OR_RETURN(std::string qdisc, run_command(joined(tc, {"qdisc", "show", "dev", dev})));
      std::vector<std::vector<std::string>> cmds;
      if (qdisc.find("netem") != std::string::npos) {
        cmds.push_back(joined(joined(tc, {"qdisc", "change", "dev", dev, "root"}), netem_args(link)));
      } else if (qdisc.find("htb") != std::string::npos) {
        if (latency_s && *latency_s != w.link.latency_s)
          return failed_precondition(w.rule + ": its latency cannot change: this kernel has no sch_netem, "
                                     "and htb shapes the bandwidth only; change --bandwidth-gbps alone");
        cmds.push_back(joined(joined(tc, {"class", "change", "dev", dev, "parent", "1:", "classid", "1:1"}),
                              htb_class_args(link)));
      } else {
        return failed_precondition(w.rule + " (" + from.netns + " " + dev +
                                   ") is not shaped: the testbed is not up; run harp testbed up first");
      }
      cmds.push_back(gso_command(from.netns, dev, link, t->packet_us));
      for (const auto& cmd : cmds) HARP_RETURN_IF_ERROR(run_command(cmd).status());
    }
    w.link = link;
    ++changed;
  }
  if (changed == 0) return not_found("no link of the testbed joins these two subclusters");
  return changed;
}

StatusOr<bool> ensure_up(const cluster::Cluster& cluster, const Topology& t) {
  HARP_ASSIGN_OR_RETURN(Report report, status(cluster, t));
  if (report.up) return false;
  HARP_RETURN_IF_ERROR(up(t));
  return report.namespaces == 0;
}

StatusOr<int> down(const std::string& prefix) {
  HARP_ASSIGN_OR_RETURN(std::vector<std::string> names, namespaces_with_prefix(prefix));
  clear_device_slowdowns(prefix);
  int removed = 0;
  Status first;
  for (const std::string& ns : names) {
    auto r = run_command({"ip", "netns", "del", ns});
    if (r.ok())
      ++removed;
    else if (first.ok())
      first = r.status();
  }
  if (!first.ok()) return first;
  return removed;
}

StatusOr<Report> status(const cluster::Cluster& cluster, const Topology& t) {
  HARP_ASSIGN_OR_RETURN(std::vector<std::string> existing, namespaces_with_prefix(t.prefix));
  const std::set<std::string> have(existing.begin(), existing.end());
  Report report;
  report.up = true;
  report.namespaces = static_cast<int>(existing.size());
  std::ostringstream o;
  o << "testbed " << t.prefix << " for cluster '" << cluster.name << "': " << t.hosts.size() << " hosts, "
    << t.wires.size() << " links\n";
  for (int i = 0; i < static_cast<int>(t.hosts.size()); ++i) {
    const Host& h = t.hosts[i];
    const auto& sc = cluster.subclusters[h.subcluster];
    const bool up_now = have.count(h.netns) > 0;
    report.up = report.up && up_now;
    o << "  host " << i << "  " << h.netns << "  " << h.address << "  " << sc.name
      << (h.node >= 0 ? " node " + std::to_string(h.node) : std::string()) << "  devices";
    for (int d : h.devices) o << " " << d;
    o << "  (" << sc.device;
    const auto dev = cluster.devices.find(sc.device);
    if (dev != cluster.devices.end() && dev->second.emulated_slowdown > 1.0)
      o << ", emulated " << format_double(dev->second.emulated_slowdown) << "x slower";
    o << ")" << (up_now ? "" : "  [missing]") << "\n";
  }
  for (const Wire& w : t.wires) {
    o << "  link " << w.a << " <-> " << w.b << "  " << format_double(w.link.bandwidth_gbps) << " Gbit/s, "
      << format_double(w.link.latency_s * 1e6) << " us one way  (" << w.rule << ")";
    for (int side = 0; side < 2; ++side) {
      const Host& from = t.hosts[side == 0 ? w.a : w.b];
      if (!have.count(from.netns)) continue;
      const std::string dev = Topology::veth_name(side == 0 ? w.b : w.a);
      auto q = run_command({"tc", "-n", from.netns, "qdisc", "show", "dev", dev});
      std::string line = q.ok() ? q->substr(0, q->find('\n')) : std::string("missing");
      if (line.find("netem") != std::string::npos) {
        report.latency_shaped = true;
      } else if (line.find("htb") != std::string::npos) {
        auto cls = run_command({"tc", "-n", from.netns, "class", "show", "dev", dev});
        const std::size_t at = cls.ok() ? cls->find("class htb 1:1 root") : std::string::npos;
        line = at != std::string::npos ? cls->substr(at, cls->find('\n', at) - at)
                                       : "not shaped: htb without its class";
        if (line.find("not shaped") != std::string::npos) report.up = false;
      } else {
        line = "not shaped: " + line;
        report.up = false;
      }
      o << "\n      " << (side == 0 ? std::to_string(w.a) + "->" + std::to_string(w.b)
                                    : std::to_string(w.b) + "->" + std::to_string(w.a))
        << ": " << line;
    }
    o << "\n";
  }
  o << "  within a host: loopback, unshaped\n";
  if (!t.wires.empty() && report.up && !report.latency_shaped)
    o << "  latency: not shaped (this kernel has no sch_netem; htb shapes the bandwidth only): each link keeps\n"
         "  the veth's own latency, tens of microseconds; declare about that in the cluster file\n";
  o << "  state: " << (report.up ? "up" : existing.empty() ? "down" : "partly up (run `harp testbed up` again)")
    << "\n";
  report.text = o.str();
  return report;
}

}  // namespace harp::testbed
