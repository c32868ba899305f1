// `harp testbed up|down|status|probe|set --cluster FILE [--prefix P]`: the emulated heterogeneous
// cluster on this machine (harp/testbed/testbed.h). Without root or namespaces, `up` says
// so in one line and exits 3 (the machine cannot do what was asked); `status` and
// `down` still work where `ip` runs.
#include <signal.h>
#include <algorithm>
#include <atomic>
#include <functional>

#include "commands.h"
#include "validators.h"
#include "harp/cluster/cluster_io.h"
#include "harp/common/document.h"
#include "harp/common/format.h"
#include "harp/common/parse.h"
#include "harp/testbed/probe.h"
#include "harp/testbed/testbed.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string cluster_file;
  std::string prefix;
  double packet_us = testbed::kDefaultPacketUs;
  bool dry_run = false;
  // probe
  std::vector<std::string> sizes;
  int repeats = 5;
  double max_message_s = 0.5;
  std::string csv_file, svg_file;
  // set
  std::string link, device_slowdown;
  std::optional<double> bandwidth_gbps, latency_us;
};

StatusOr<testbed::Topology> topology_of(const Opts& o, cluster::Cluster* cluster) {
  HARP_ASSIGN_OR_RETURN(*cluster, cluster::load_cluster(o.cluster_file));
  return testbed::topology_for(*cluster, o.prefix, o.packet_us);
}

int run_up(const Opts& o, Context& ctx) {
  cluster::Cluster c;
  auto t = topology_of(o, &c);
  if (!t.ok()) return ctx.fail("testbed up", t.status());
  if (o.dry_run) {
    auto print = [&](const std::vector<std::string>& cmd) {
      std::string line;
      for (const auto& a : cmd) line += (line.empty() ? "" : " ") + a;
      ctx.out << line << "\n";
    };
    for (const auto& h : t->hosts) print(testbed::netns_add_command(h));
    for (const auto& w : t->wires) print(testbed::veth_add_command(*t, w));
    for (const auto& cmd : testbed::up_commands(*t, testbed::Shaper::kNetem)) print(cmd);
    return kExitOk;
  }
  if (Status s = testbed::available(); !s.ok()) {
    ctx.err << "harp testbed up: " << s.message() << "\n";
    return kExitInfeasible;
  }
  if (Status s = testbed::up(*t); !s.ok()) return ctx.fail("testbed up", s);
  auto r = testbed::status(c, *t);
  if (!r.ok()) return ctx.fail("testbed up", r.status());
  ctx.out << r->text;
  return kExitOk;
}

int run_down(const Opts& o, Context& ctx) {
  std::string prefix = o.prefix;
  if (prefix.empty()) {
    cluster::Cluster c;
    auto t = topology_of(o, &c);
    if (!t.ok()) return ctx.fail("testbed down", t.status());
    prefix = t->prefix;
  }
  auto n = testbed::down(prefix);
  if (!n.ok()) return ctx.fail("testbed down", n.status());
  ctx.out << "testbed " << prefix << ": removed " << *n << " namespace" << (*n == 1 ? "" : "s") << "\n";
  return kExitOk;
}

int run_status(const Opts& o, Context& ctx) {
  cluster::Cluster c;
  auto t = topology_of(o, &c);
  if (!t.ok()) return ctx.fail("testbed status", t.status());
  auto r = testbed::status(c, *t);
  if (!r.ok()) return ctx.fail("testbed status", r.status());
  ctx.out << r->text;
  return kExitOk;
}

// SIGINT or SIGTERM while the probe runs: noted, so that the probe stops at its next cell
// and the namespaces it brought up are taken down (they were left behind).
std::atomic<int> g_probe_signal{0};
void on_probe_signal(int sig) { g_probe_signal = sig; }

// Catches SIGINT and SIGTERM for its lifetime (the old handlers back after).
struct ProbeSignals {
  struct sigaction old_int {
  }, old_term{};
  ProbeSignals() {
    g_probe_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_probe_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~ProbeSignals() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

int run_probe(const Opts& o, Context& ctx) {
  cluster::Cluster c;
  auto t = topology_of(o, &c);
  if (!t.ok()) return ctx.fail("testbed probe", t.status());
  testbed::ProbeOptions po;
  if (!o.sizes.empty()) {
    po.sizes.clear();
    for (const std::string& s : o.sizes) {
      auto b = testbed::parse_message_size(s);
      if (!b.ok()) return ctx.fail("testbed probe", b.status());
      po.sizes.push_back(*b);
    }
  }
  po.repeats = o.repeats;
  po.max_message_s = o.max_message_s;
  if (Status s = testbed::available(); !s.ok()) {
    ctx.err << "harp testbed probe: " << s.message() << "\n";
    return kExitInfeasible;
  }
  // Up for the probe, and down again after (interrupted too), unless it was up before.
  const ProbeSignals signals;
  po.stop = [] { return g_probe_signal.load() != 0; };
  auto brought_up = testbed::ensure_up(c, *t);
  if (!brought_up.ok()) return ctx.fail("testbed probe", brought_up.status());
  if (!*brought_up)  // its links keep what they were brought up with, packet time included
    ctx.out << "testbed " << t->prefix << " was already up: probing its links as they are (--packet-us applies only "
            << "where this command brings the testbed up; harp testbed down first to probe another)\n";
  ctx.out << "probing " << t->wires.size() << " link(s) of testbed " << t->prefix << ", " << po.repeats
          << " messages per cell; sizes whose model time exceeds " << po.max_message_s << " s are skipped\n";
  auto rows = testbed::probe_links(*t, po, [&](const std::string& line) { ctx.out << line << std::endl; });
  if (*brought_up) {
    auto down = testbed::down(t->prefix);
    (void)down;
  }
  if (const int sig = g_probe_signal.load(); sig != 0) {
    ctx.err << "harp testbed probe: interrupted by " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << "; "
            << (*brought_up ? "the testbed it brought up is down again" : "the testbed stays up as it was")
            << ", nothing was written\n";
    return ctx.rc = 128 + sig;
  }
  if (!rows.ok()) return ctx.fail("testbed probe", rows.status());
  testbed::write_probe_report(*t, *rows, ctx.out);
  for (const auto& [file, text] : {std::pair{o.csv_file, testbed::probe_csv(*t, *rows)},
                                   std::pair{o.svg_file, testbed::probe_svg(*t, *rows)}}) {
    if (file.empty()) continue;
    if (Status s = write_text_file_atomic(file, text); !s.ok()) return ctx.fail("testbed probe", s);
    ctx.out << "wrote " << file << "\n";
  }
  return kExitOk;
}

// The two subclusters "A-B" names (a name may itself hold '-': every split is tried).
StatusOr<std::pair<int, int>> link_ends(const cluster::Cluster& c, const std::string& text) {
  auto index = [&](const std::string& name) {
    for (int i = 0; i < static_cast<int>(c.subclusters.size()); ++i)
      if (c.subclusters[i].name == name) return i;
    return -1;
  };
  for (std::size_t dash = text.find('-'); dash != std::string::npos; dash = text.find('-', dash + 1)) {
    const int a = index(text.substr(0, dash)), b = index(text.substr(dash + 1));
    if (a >= 0 && b >= 0) return std::make_pair(a, b);
  }
  std::string names;
  for (const auto& s : c.subclusters) names += (names.empty() ? "" : ", ") + s.name;
  return invalid_argument("--link " + text.substr(0, 80) + ": not two subclusters of the cluster joined by '-' (they are " +
                          names + "); write e.g. --link " + c.subclusters.front().name + "-" +
                          c.subclusters.back().name);
}

// --device-slowdown NAME=F: the subcluster's devices compute F x slower.
int set_slowdown(const Opts& o, const cluster::Cluster& c, const testbed::Topology& t, Context& ctx) {
  const std::size_t eq = o.device_slowdown.find('=');
  const std::string name = o.device_slowdown.substr(0, eq);
  auto factor = eq == std::string::npos ? StatusOr<double>(invalid_argument("")) : parse_real(o.device_slowdown.substr(eq + 1));
  const bool known = std::any_of(c.subclusters.begin(), c.subclusters.end(), [&](const auto& s) { return s.name == name; });
  if (!known || !factor.ok() || *factor < 1 || *factor > 1000) {
    ctx.err << "harp testbed set: --device-slowdown " << o.device_slowdown.substr(0, 80)
            << ": write SUBCLUSTER=FACTOR, a subcluster of the cluster and a factor in [1, 1000] (1: none), e.g. "
            << c.subclusters.back().name << "=2\n";
    return ctx.rc = kExitUsage;
  }
  if (Status s = testbed::set_device_slowdown(t.prefix, name, *factor); !s.ok()) return ctx.fail("testbed set", s);
  ctx.out << "subcluster " << name << ": its devices compute " << fmt("%g", *factor)
          << "x slower from each rank's next step (runs launched with --testbed " << t.prefix << ")\n";
  return kExitOk;
}

int run_set(const Opts& o, Context& ctx) {
  const bool link_change = o.bandwidth_gbps || o.latency_us;
  if ((o.link.empty() || !link_change) && o.device_slowdown.empty()) {
    ctx.err << "harp testbed set: give --link A-B with --bandwidth-gbps X and/or --latency-us Y, or "
               "--device-slowdown SUBCLUSTER=FACTOR\n";
    return ctx.rc = kExitUsage;
  }
  if (!o.link.empty() && !link_change) {
    ctx.err << "harp testbed set: --link needs --bandwidth-gbps X and/or --latency-us Y\n";
    return ctx.rc = kExitUsage;
  }
  cluster::Cluster c;
  auto t = topology_of(o, &c);
  if (!t.ok()) return ctx.fail("testbed set", t.status());
  if (!o.device_slowdown.empty()) {
    if (const int rc = set_slowdown(o, c, *t, ctx); rc != kExitOk || o.link.empty()) return rc;
  }
  auto ends = link_ends(c, o.link);
  if (!ends.ok()) {
    ctx.err << "harp testbed set: " << ends.status().message() << "\n";
    return ctx.rc = kExitUsage;
  }
  if (Status s = testbed::available(); !s.ok()) {
    ctx.err << "harp testbed set: " << s.message() << "\n";
    return kExitInfeasible;
  }
  std::optional<double> latency_s;
  if (o.latency_us) latency_s = *o.latency_us * 1e-6;
  const std::vector<testbed::Wire> before = t->wires;
  auto n = testbed::set_link(&*t, ends->first, ends->second, o.bandwidth_gbps, latency_s);
  if (!n.ok()) return ctx.fail("testbed set", n.status());
  for (std::size_t i = 0; i < t->wires.size(); ++i) {
    const auto &was = before[i].link, &now = t->wires[i].link;
    if (was.bandwidth_gbps == now.bandwidth_gbps && was.latency_s == now.latency_s) continue;
    ctx.out << "link " << t->wires[i].a << " <-> " << t->wires[i].b << " (" << t->wires[i].rule << "): "
            << fmt("%g -> %g Gbit/s, %g -> %g us one way", was.bandwidth_gbps, now.bandwidth_gbps, was.latency_s * 1e6,
                   now.latency_s * 1e6)
            << "\n";
  }
  ctx.out << "changed " << *n << (*n == 1 ? " link" : " links")
          << " in place (the cluster file's figures come back with harp testbed up)\n";
  return kExitOk;
}

}  // namespace

void add_testbed_command(CLI::App& root, Context& ctx) {
  // Flags checked as they are parsed: a bad value is a bad command line (exit 2), found
  // before any file is read or namespace made.
  auto rule = [](std::function<Status(const std::string&)> check, const char* what) {
    return CLI::Validator(
        [check](std::string& text) -> std::string {
          const Status s = check(text);
          return s.ok() ? std::string() : s.message();
        },
        what);
  };
  const CLI::Validator prefix_rule = rule([](const std::string& p) { return testbed::check_prefix(p); }, "PREFIX");
  const CLI::Validator size_rule =
      rule([](const std::string& s) { return testbed::parse_message_size(s).status(); }, "SIZE");
  auto* cmd = root.add_subcommand("testbed", "The emulated cluster on this machine: namespaces and shaped links");
  cmd->require_subcommand(1, 1);
  auto o = std::make_shared<Opts>();
  auto add = [&](const char* name, const char* help) {
    auto* sub = cmd->add_subcommand(name, help);
    sub->add_option("--cluster", o->cluster_file, "Cluster file (YAML or JSON)")->required(std::string(name) != "down");
    sub->add_option("--prefix", o->prefix, "Namespace name prefix (default: harp + the cluster's fingerprint)")
        ->check(prefix_rule);
    if (std::string(name) != "down" && std::string(name) != "status")
      sub->add_option("--packet-us", o->packet_us,
                      std::string(name) == "probe"
                          ? "Where the probe brings the testbed up: the time one packet takes on a shaped link"
                          : "The time one packet takes on a shaped link (its GSO segments; docs/testbed.md)")
          ->capture_default_str()
          ->check(real(10, 100000, false, "us"));
    return sub;
  };
  auto* up = add("up", "Create (or repair) one namespace per host and the shaped links between them");
  up->add_flag("--dry-run", o->dry_run, "Print the ip and tc commands instead of running them (netem's)");
  up->callback([o, &ctx] { ctx.rc = run_up(*o, ctx); });
  auto* down = add("down", "Remove every namespace of the testbed (and with them its links and qdiscs)");
  down->callback([o, &ctx] {
    if (o->cluster_file.empty() && o->prefix.empty()) {
      ctx.err << "harp testbed down: give --cluster FILE or --prefix P\n";
      ctx.rc = kExitUsage;
      return;
    }
    ctx.rc = run_down(*o, ctx);
  });
  auto* probe = add("probe", "Time messages over every link (sizes x traffic patterns) against the link model");
  probe->add_option("--sizes", o->sizes, "Message sizes (e.g. 1K,16K,1M; default 1K to 4M)")
      ->delimiter(',')
      ->check(size_rule);
  probe->add_option("--repeats", o->repeats, "Timed messages per cell")->check(whole(2, 1000));
  probe->add_option("--max-message-s", o->max_message_s, "Skip sizes whose modelled time exceeds this")
      ->check(real(0.001, 60, false, "s"));
  probe->add_option("--csv", o->csv_file, "Write the rows as CSV");
  probe->add_option("--svg", o->svg_file, "Draw measured / model against size, per link");
  probe->callback([o, &ctx] { ctx.rc = run_probe(*o, ctx); });
  add("status", "Show the testbed's hosts, links and the qdiscs found on them")->callback([o, &ctx] {
    ctx.rc = run_status(*o, ctx);
  });
  auto* set = add("set", "Change a link of the running testbed in place (a link that slows while a job runs)");
  set->add_option("--link", o->link, "The two subclusters the link joins, A-B");
  set->add_option("--bandwidth-gbps", o->bandwidth_gbps, "New bandwidth, Gbit/s")
      ->check(in_quantity(quantity::kBandwidthGbps));
  set->add_option("--latency-us", o->latency_us, "New one-way latency, microseconds (netem only)")
      ->check(real(0, 10e6, false, "us"));
  set->add_option("--device-slowdown", o->device_slowdown,
                  "SUBCLUSTER=FACTOR: its devices compute FACTOR x slower in running jobs (1: as the cluster file says)");
  set->callback([o, &ctx] { ctx.rc = run_set(*o, ctx); });
}

}  // namespace harp::cli
