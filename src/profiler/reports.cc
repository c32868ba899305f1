// What `harp profile check` and `harp profile links` measured, as they print it.
#include "harp/profiler/reports.h"

#include <algorithm>
#include <cmath>

#include "harp/common/format.h"
#include "harp/common/table.h"

namespace harp::profiler {
namespace {

std::string link_entry(double bytes_per_s, double latency_s, bool latency_in_ms) {
  const double gbps = bytes_per_s * 8 / 1e9;
  return latency_in_ms ? fmt("{bandwidth_gbps: %.3g, latency_ms: %.3g}", gbps, latency_s * 1e3)
                       : fmt("{bandwidth_gbps: %.3g, latency_us: %.3g}", gbps, latency_s * 1e6);
}

}  // namespace

void write_stage_checks(const plan::Plan& p, const std::vector<StageCheck>& checks, std::ostream& out) {
  Table t({"stage", "subcluster", "layers", "samples", "predicted F+B", "measured F+B", "error", "spread"});
  std::vector<double> errors;
  for (const auto& c : checks) {
    const plan::Stage& st = p.stages[c.stage];
    std::string sub = st.subcluster_name;
    if (c.slowdown > 1) sub += fmt(" (emulated x%g)", c.slowdown);
    t.add({std::to_string(c.stage), sub, fmt("[%d, %d)", st.first_layer, st.last_layer), std::to_string(c.samples),
           fmt_time(c.predicted_fwd_s + c.predicted_bwd_s), fmt_time(c.measured.fwd.median_s + c.measured.bwd.median_s),
           fmt("%+.1f%%", 100 * c.error()),
           fmt("%.1f%%", 100 * std::max(c.measured.fwd.spread, c.measured.bwd.spread))});
    errors.push_back(std::abs(c.error()));
  }
  out << "predicted (" << p.cost_source << ") against measured compute per microbatch, per stage\n\n";
  t.print(out);
  std::sort(errors.begin(), errors.end());
  out << fmt("\nmedian |error| %.1f%%, largest %.1f%%\n", 100 * errors[(errors.size() - 1) / 2], 100 * errors.back());
}

std::vector<double> link_sizes(const plan::Plan* p) {
  std::vector<double> sizes = {4096, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};
  if (p != nullptr) {
    // What the runtime sends across each cut: float32 elements of the cut shape.
    for (size_t s = 0; s + 1 < p->stages.size(); ++s) {
      double elems = p->stages[s].dp < 1 ? p->microbatch_size : p->stages[s].largest_share(p->microbatch_size);
      for (auto d : p->stages[s].cut_shape) elems *= static_cast<double>(d);
      if (elems >= 1) sizes.push_back(4 * elems);
    }
    std::sort(sizes.begin(), sizes.end());
  }
  return sizes;
}

void write_link_report(const std::vector<double>& sizes, const LinkReport& r, const cluster::Cluster* cl,
                       std::ostream& out) {
  Table t({"bytes", "one way", "all-reduce (2 ranks)"});
  for (size_t i = 0; i < sizes.size(); ++i)
    t.add({fmt_bytes(sizes[i]), fmt_time(r.p2p.points[i].second), fmt_time(r.allreduce.points[i].second)});
  t.print(out);
  out << fmt("\npoint-to-point: latency %.1f us, %.3g Gbit/s; all-reduce: latency %.1f us, %.3g Gbit/s\n",
             r.p2p.latency_s * 1e6, r.p2p.bytes_per_s * 8 / 1e9, r.allreduce.latency_s * 1e6,
             r.allreduce.bytes_per_s * 8 / 1e9);
  out << "\n# cluster-file entries measured by harp profile links (Gloo over 127.0.0.1, this machine)\n";
  const std::string entry_us = link_entry(r.p2p.bytes_per_s, r.p2p.latency_s, false);
  if (!cl) {
    out << "intra_node: " << entry_us << "\ninter_node: " << entry_us << "\nlinks:\n  - {between: [A, B], "
        << link_entry(r.p2p.bytes_per_s, r.p2p.latency_s, true).substr(1) << "\n";
    return;
  }
  out << "subclusters:\n";
  for (const auto& s : cl->subclusters)
    out << "  - {name: " << s.name << ", device: " << s.device << ", nodes: " << s.nodes
        << ", devices_per_node: " << s.devices_per_node << ",\n     intra_node: " << entry_us
        << ", inter_node: " << entry_us << "}\n";
  if (!cl->links.empty()) out << "links:\n";
  for (const auto& l : cl->links)
    out << "  - {between: [" << l.a << ", " << l.b << "], "
        << link_entry(r.p2p.bytes_per_s, r.p2p.latency_s, true).substr(1) << "\n";
}

}  // namespace harp::profiler
