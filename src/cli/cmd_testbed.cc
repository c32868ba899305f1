// `harp testbed up|down|status --cluster FILE [--prefix P]`: the emulated heterogeneous
// cluster on this machine (harp/testbed/testbed.h). Without root or namespaces, `up` says
// so in one line and exits 3 (the machine cannot do what was asked); `status` and
// `down` still work where `ip` runs.
#include "commands.h"
#include "harp/cluster/cluster_io.h"
#include "harp/testbed/testbed.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string cluster_file;
  std::string prefix;
  bool dry_run = false;
};

StatusOr<testbed::Topology> topology_of(const Opts& o, cluster::Cluster* cluster) {
  HARP_ASSIGN_OR_RETURN(*cluster, cluster::load_cluster(o.cluster_file));
  return testbed::topology_for(*cluster, o.prefix.empty() ? testbed::default_prefix(*cluster) : o.prefix);
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

}  // namespace

void add_testbed_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("testbed", "The emulated cluster on this machine: namespaces and shaped links");
  cmd->require_subcommand(1, 1);
  auto o = std::make_shared<Opts>();
  auto add = [&](const char* name, const char* help) {
    auto* sub = cmd->add_subcommand(name, help);
    sub->add_option("--cluster", o->cluster_file, "Cluster file (YAML or JSON)")->required(std::string(name) != "down");
    sub->add_option("--prefix", o->prefix, "Namespace name prefix (default: harp + the cluster's fingerprint)");
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
  add("status", "Show the testbed's hosts, links and the qdiscs found on them")->callback([o, &ctx] {
    ctx.rc = run_status(*o, ctx);
  });
}

}  // namespace harp::cli
