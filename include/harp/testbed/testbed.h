// The emulated heterogeneous cluster on one machine (DESIGN.md, "Testing heterogeneity
// without a heterogeneous cluster"): one Linux network namespace per host (a subcluster,
// or a node of it when the subcluster has several nodes), a veth pair between every two
// hosts, and each veth end shaped with `tc` (netem, or htb where the kernel lacks netem) to
// the link's bandwidth and latency, so the bytes a plan sends between subclusters cross a
// link as slow as the cluster file says. Ranks of one host share its loopback (unshaped:
// intra-node links run at this machine's loopback speed). Torch-free; it drives `ip` and `tc` (iproute2) as root.
//
// Addresses: host i answers at 10.99.<i / 250>.<i % 250 + 1> on its loopback; routes to
// the other hosts go over the veth to that host, with the host's own address as source,
// so every rank binds one address that every other rank reaches over the right link.
// Nothing is added to the initial namespace: deleting the namespaces (found by their
// name prefix) removes the veths and their qdiscs with them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/status.h"

namespace harp::testbed {

struct Host {
  std::string netns;    // the namespace's name: <prefix>-h<index>
  std::string address;  // IPv4, on the namespace's loopback
  int subcluster = 0;
  int node = 0;                // within the subcluster; -1 when one host holds every node
  std::vector<int> devices;    // global device ids this host runs
};

// The link between two hosts and where its figures came from.
struct Wire {
  int a = 0, b = 0;  // host indices, a < b
  cluster::Link link;
  std::string rule;  // "link fast-slow", "inter-node of fast", "via fast-mid-slow: ..."
};

// How much of a shaped link's time one packet takes, by default (gso_segments).
inline constexpr double kDefaultPacketUs = 500;

struct Topology {
  std::string prefix;
  // The time one packet takes on a shaped link (`harp testbed up --packet-us`): up() and
  // set_link() size the veths' packets by it (gso_segments).
  double packet_us = kDefaultPacketUs;
  std::vector<Host> hosts;
  std::vector<Wire> wires;

  // REQUIRES: 0 <= device < the cluster's device count.
  int host_of_device(int device) const;
  // The veth end in host `from`'s namespace that leads to host `to`.
  static std::string veth_name(int to) { return "hb" + std::to_string(to); }
};

// The default prefix of a cluster's testbed: "harp" + the first 6 hex digits of its
// fingerprint, so testbeds of different clusters can exist side by side.
std::string default_prefix(const cluster::Cluster& cluster);

// InvalidArgument for a prefix that is empty, longer than 24 characters or not made of
// [a-z0-9] (it names namespaces, which `down` finds by it).
Status check_prefix(const std::string& prefix);

// One host per subcluster; one per node where the subcluster has several nodes (joined by
// its inter-node link). Pairs of subclusters the cluster file links directly get that
// link; other pairs get the path through the subclusters between them (the slowest
// bandwidth, the sum of latencies), as traffic routed along the chain would see.
// InvalidArgument for more than 1000 hosts. An empty `prefix` is the cluster's
// default_prefix (what the command lines do when --prefix is not given).
// `packet_us` is the time one packet takes on a shaped link (Topology::packet_us).
StatusOr<Topology> topology_for(const cluster::Cluster& cluster, const std::string& prefix,
                                double packet_us = kDefaultPacketUs);

// How links are shaped: netem (bandwidth and latency) where the kernel has sch_netem,
// else htb (bandwidth only; the link keeps the veth's own latency, tens of us).
enum class Shaper { kNetem, kHtb };
const char* shaper_name(Shaper shaper);

// The veths' wire rate per unit of the cluster file's bandwidth: a frame's bytes over
// the TCP payload it carries (1514 / 1448 at MTU 1500). The testbed shapes each link to
// bandwidth x this, so that a transfer moves its payload at the declared bandwidth.
double wire_rate_factor();

// Segments per GSO packet on a link's veths (`gso_max_segs`): what the link sends in
// packet_us, rounded, at least 1 and at most 64. htb sends each packet it holds back from
// a timer interrupt, whose time this kernel charges to the thread it lands on (a
// computing rank's); a larger packet means fewer of them, and a message on an idle link
// arriving up to one packet (packet_us) early (docs/testbed.md).
int gso_segments(const cluster::Link& link, double packet_us = kDefaultPacketUs);

// What makes a host's namespace, and the veth pair of a wire (inside its two
// namespaces); `up` runs each only when the thing is missing.
std::vector<std::string> netns_add_command(const Host& host);
std::vector<std::string> veth_add_command(const Topology& topology, const Wire& wire);

// The shell-free argument vectors `up` runs once the namespaces and veths exist, in order
// (for tests and `up --dry-run`). Re-running them leaves the same state; a `tc qdisc del`
// among them may fail (nothing to remove), which up() accepts.
std::vector<std::vector<std::string>> up_commands(const Topology& topology, Shaper shaper);

// Runs a command (argv[0] searched in PATH) and returns what it printed on stdout; an
// error carrying its first line of stderr if it fails. At most 1 MiB of output is kept.
StatusOr<std::string> run_command(const std::vector<std::string>& argv);

// Ok when this process can make namespaces: root, `ip` and `tc` found, and a probe
// namespace could be made and removed. Otherwise FailedPrecondition with one line saying
// what is missing.
Status available();

// Brings the testbed up (idempotent; namespaces of the prefix that the topology lacks are
// removed). On failure, what was made is removed again.
Status up(const Topology& topology);

// Brings the testbed up unless status() finds it fully up already. Returns true when no
// namespace of its prefix existed before, so the caller brought it up and should take it
// down when done (`harp launch --testbed`, `harp testbed probe`).
StatusOr<bool> ensure_up(const cluster::Cluster& cluster, const Topology& topology);

// Removes every namespace whose name starts with "<prefix>-" (and with it the veths and
// qdiscs); returns how many it removed. Safe to call when nothing is up.
StatusOr<int> down(const std::string& prefix);

// Changes, in place and while ranks may be sending over them, the links between the hosts
// of subclusters `a` and `b` (indices; a == b: the inter-node links of one subcluster) of a
// testbed that is up: each direction's shaping takes `bandwidth_gbps` and, where netem
// shapes (it alone delays), `latency_s`; a figure not given is kept. The wires changed get
// the new figures in `topology` (what a probe then models). Returns how many changed;
// NotFound when no wire joins the two, FailedPrecondition when a link is not shaped (the
// testbed is not up) or a latency is asked of htb. The cluster file is not touched: `up`
// puts its figures back. For drift experiments (a link that slows while a job runs).
StatusOr<int> set_link(Topology* topology, int a, int b, std::optional<double> bandwidth_gbps,
                       std::optional<double> latency_s);

// Makes the devices of subcluster `subcluster` of the testbed `prefix` compute `factor`
// (>= 1) times slower from each rank's next step, on top of any emulation
// (launch::testbed_slowdown_file); 1 takes it back. up() and down() clear every such file.
Status set_device_slowdown(const std::string& prefix, const std::string& subcluster, double factor);
void clear_device_slowdowns(const std::string& prefix);

// The namespaces that exist now with the prefix, sorted.
StatusOr<std::vector<std::string>> namespaces_with_prefix(const std::string& prefix);

// A person-readable report: each host, its devices and address, each wire with its
// figures and the qdisc found on it now (or "missing"). `up` says whether it is up.
struct Report {
  bool up = false;
  bool latency_shaped = false;  // netem found on the links
  int namespaces = 0;           // of the prefix, found now (0: nothing is up)
  std::string text;
};
StatusOr<Report> status(const cluster::Cluster& cluster, const Topology& topology);

}  // namespace harp::testbed
