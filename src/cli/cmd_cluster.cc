// `harp cluster show FILE`: the cluster as a table.
#include "commands.h"
#include "harp/cluster/cluster_io.h"
#include "harp/common/table.h"

namespace harp::cli {
namespace {

std::string link_text(const cluster::Link& l) {
  if (l.bandwidth_gbps <= 0) return "-";
  return fmt("%g Gbit/s, %g us", l.bandwidth_gbps, l.latency_s * 1e6);
}

int run_cluster_show(const std::string& file, Context& ctx) {
  auto c = cluster::load_cluster(file);
  if (!c.ok()) return ctx.fail("cluster show", c.status());
  ctx.out << "cluster " << c->name << ": " << c->subclusters.size() << " subclusters, "
          << c->num_devices() << " devices (fingerprint " << c->fingerprint() << ")\n\n";
  Table t({"subcluster", "device", "nodes x devs", "ids", "TFLOP/s", "memory", "intra-node",
           "inter-node"});
  double peak = 0;
  for (int i = 0; i < static_cast<int>(c->subclusters.size()); ++i) {
    const auto& s = c->subclusters[i];
    const auto& d = c->device_of(i);
    peak += d.peak_tflops * s.num_devices();
    int first = c->first_device_id(i);
    t.add({s.name, d.name + (d.emulated_slowdown != 1 ? fmt(" (emulated x%g slower)", d.emulated_slowdown) : ""),
           fmt("%d x %d", s.nodes, s.devices_per_node),
           fmt("%d-%d", first, first + s.num_devices() - 1), fmt("%g", d.peak_tflops),
           fmt("%g GiB", d.memory_gib), s.devices_per_node > 1 ? link_text(s.intra_node) : "-",
           s.nodes > 1 ? link_text(s.inter_node) : "-"});
  }
  t.print(ctx.out);
  if (!c->links.empty()) {
    ctx.out << "\nlinks between subclusters\n";
    Table lt({"between", "bandwidth", "latency"});
    for (const auto& l : c->links)
      lt.add({l.a + " <-> " + l.b, fmt("%g Gbit/s", l.link.bandwidth_gbps),
              fmt("%g ms", l.link.latency_s * 1e3)});
    lt.print(ctx.out);
  }
  ctx.out << "\naggregate peak: " << fmt("%.1f", peak) << " TFLOP/s (dense fp16/bf16)\n";
  return kExitOk;
}

}  // namespace

void add_cluster_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("cluster", "Inspect a cluster spec");
  cmd->require_subcommand(1, 1);
  auto* show = cmd->add_subcommand("show", "Print a cluster file as a table");
  auto file = std::make_shared<std::string>();
  show->add_option("file", *file, "Cluster file (YAML or JSON)")->required();
  show->callback([file, &ctx] { ctx.rc = run_cluster_show(*file, ctx); });
}

}  // namespace harp::cli
