// The measuring half of `harp profile` (built into harp-train, which links libtorch):
// `harp profile --job JOB -o P.json` measures the job's model, one layer per signature,
// for every microbatch size the planner will ask for, and records it for each device
// type this machine stands in for; `harp profile check --plan PLAN` runs the plan's
// stages here and prints predicted against measured stage time.
#include <algorithm>
#include <optional>

#include "cmd_profile.h"
#include "harp/cluster/cluster_io.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/profiler/profile_job.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/exec/memory.h"
#include "harp/runtime/nn/trainable.h"
#include "harp/common/table.h"

namespace harp::cli {
namespace {

int run_measure(const ProfileOpts& o, Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("profile", job.status());
  profiler::JobProfileRequest r{o.devices, o.microbatch_sizes, o.per_layer, o.quick, o.threads};
  auto p = profiler::profile_job(*job, r, [&ctx](const std::string& line) { ctx.err << line << "\n" << std::flush; });
  if (!p.ok()) return ctx.fail("profile", p.status());
  if (Status s = profile::save_profile_db(p->db, o.output); !s.ok()) return ctx.fail("profile", s);
  const profiler::ProfileReport& report = p->total;
  ctx.out << "measured " << report.measured << " layer(s) (" << report.unique << " unique of " << report.layers
          << " per microbatch size and slowdown; a per-layer profiler measures "
          << report.layers * static_cast<int>(p->microbatch_sizes.size()) * p->slowdowns << ") in "
          << fmt_time(report.wall_s) << "; optimizer step " << fmt("%.3g", p->optimizer_s_per_param_byte * 1e9)
          << " ns per parameter byte\n";
  ctx.out << "wrote " << o.output << ":";
  for (const cluster::DeviceType* d : p->devices) {
    ctx.out << " " << d->name;
    if (d->emulated_slowdown > 1.0) ctx.out << fmt(" (emulated %gx slower, measured so)", d->emulated_slowdown);
  }
  ctx.out << "\n";
  return kExitOk;
}

int run_check(const ProfileOpts& o, Context& ctx) {
  auto p = plan::load_plan(o.plan_file);
  if (!p.ok()) return ctx.fail("profile check", p.status());
  if (p->model_config.is_null())
    return ctx.fail("profile check", invalid_argument(o.plan_file + ": the plan has no model_config; "
                                                                    "make it with harp plan --job"));
  auto m = model::parse_model(p->model_config, o.plan_file, "model_config");
  if (!m.ok()) return ctx.fail("profile check", m.status());
  Status fits = runtime::check_plan_matches_model(*p, *m);
  if (!fits.ok()) return ctx.fail("profile check", fits);
  runtime::retain_freed_memory();
  runtime::set_compute_threads(o.threads > 0 ? o.threads : 1);
  ctx.err << "harp profile check: " << p->num_stages() << " stage(s) of " << o.plan_file << " on this CPU ("
          << (o.threads > 0 ? o.threads : 1) << " thread(s), float32)\n";
  auto checks = profiler::check_plan_stages(*m, *p, torch::kFloat32, profiler::measure_options(o.quick),
                                            [&ctx](const std::string& line) { ctx.err << "  " << line << "\n"; });
  Table t({"stage", "subcluster", "layers", "samples", "predicted F+B", "measured F+B", "error", "spread"});
  std::vector<double> errors;
  for (const auto& c : checks) {
    const plan::Stage& st = p->stages[c.stage];
    std::string sub = st.subcluster_name;
    if (c.slowdown > 1) sub += fmt(" (emulated x%g)", c.slowdown);
    t.add({std::to_string(c.stage), sub, fmt("[%d, %d)", st.first_layer, st.last_layer), std::to_string(c.samples),
           fmt_time(c.predicted_fwd_s + c.predicted_bwd_s),
           fmt_time(c.measured.fwd.median_s + c.measured.bwd.median_s), fmt("%+.1f%%", 100 * c.error()),
           fmt("%.1f%%", 100 * std::max(c.measured.fwd.spread, c.measured.bwd.spread))});
    errors.push_back(std::abs(c.error()));
  }
  ctx.out << "predicted (" << p->cost_source << ") against measured compute per microbatch, per stage\n\n";
  t.print(ctx.out);
  std::sort(errors.begin(), errors.end());
  ctx.out << fmt("\nmedian |error| %.1f%%, largest %.1f%%\n", 100 * errors[(errors.size() - 1) / 2],
                 100 * errors.back());
  return kExitOk;
}

std::string link_entry(double bytes_per_s, double latency_s, bool latency_in_ms) {
  const double gbps = bytes_per_s * 8 / 1e9;
  return latency_in_ms ? fmt("{bandwidth_gbps: %.3g, latency_ms: %.3g}", gbps, latency_s * 1e3)
                       : fmt("{bandwidth_gbps: %.3g, latency_us: %.3g}", gbps, latency_s * 1e6);
}

int run_links(const ProfileOpts& o, Context& ctx) {
  std::optional<cluster::Cluster> cl;
  if (!o.cluster_file.empty()) {
    auto loaded = cluster::load_cluster(o.cluster_file);
    if (!loaded.ok()) return ctx.fail("profile links", loaded.status());
    cl = std::move(*loaded);
  }
  std::vector<double> sizes = {4096, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};
  if (!o.plan_file.empty()) {
    auto p = plan::load_plan(o.plan_file);
    if (!p.ok()) return ctx.fail("profile links", p.status());
    // What the runtime sends across each cut: float32 elements of the cut shape.
    for (size_t s = 0; s + 1 < p->stages.size(); ++s) {
      double elems = p->microbatch_size / std::max(1, p->stages[s].dp);
      for (auto d : p->stages[s].cut_shape) elems *= static_cast<double>(d);
      if (elems >= 1) sizes.push_back(4 * elems);
    }
    std::sort(sizes.begin(), sizes.end());
  }
  runtime::retain_freed_memory();
  runtime::set_compute_threads(1);
  ctx.err << "harp profile links: 2 ranks (threads) over Gloo on 127.0.0.1, " << sizes.size() << " sizes\n";
  profiler::LinkReport r;
  try {
    r = profiler::measure_links(sizes, profiler::measure_options(o.quick));
  } catch (const std::exception& e) {
    return ctx.fail("profile links", io_error(std::string("the measurement failed: ") + e.what()));
  }
  Table t({"bytes", "one way", "all-reduce (2 ranks)"});
  for (size_t i = 0; i < sizes.size(); ++i)
    t.add({fmt_bytes(sizes[i]), fmt_time(r.p2p.points[i].second), fmt_time(r.allreduce.points[i].second)});
  t.print(ctx.out);
  ctx.out << fmt("\npoint-to-point: latency %.1f us, %.3g Gbit/s; all-reduce: latency %.1f us, %.3g Gbit/s\n",
                 r.p2p.latency_s * 1e6, r.p2p.bytes_per_s * 8 / 1e9, r.allreduce.latency_s * 1e6,
                 r.allreduce.bytes_per_s * 8 / 1e9);
  ctx.out << "\n# cluster-file entries measured by harp profile links (Gloo over 127.0.0.1, this machine)\n";
  const std::string entry_us = link_entry(r.p2p.bytes_per_s, r.p2p.latency_s, false);
  if (!cl) {
    ctx.out << "intra_node: " << entry_us << "\ninter_node: " << entry_us << "\nlinks:\n  - {between: [A, B], "
            << link_entry(r.p2p.bytes_per_s, r.p2p.latency_s, true).substr(1) << "\n";
    return kExitOk;
  }
  ctx.out << "subclusters:\n";
  for (const auto& s : cl->subclusters)
    ctx.out << "  - {name: " << s.name << ", device: " << s.device << ", nodes: " << s.nodes
            << ", devices_per_node: " << s.devices_per_node << ",\n     intra_node: " << entry_us
            << ", inter_node: " << entry_us << "}\n";
  if (!cl->links.empty()) ctx.out << "links:\n";
  for (const auto& l : cl->links)
    ctx.out << "  - {between: [" << l.a << ", " << l.b << "], "
            << link_entry(r.p2p.bytes_per_s, r.p2p.latency_s, true).substr(1) << "\n";
  return kExitOk;
}

}  // namespace

void add_profiler_commands(CLI::App& root, Context& ctx) {
  (void)root;
  (void)ctx;
  set_profile_hooks(&run_measure, &run_check, &run_links);
}

}  // namespace harp::cli
