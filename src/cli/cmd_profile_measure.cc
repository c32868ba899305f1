// The measuring half of `harp profile` (built into harp-train, which links libtorch):
// `harp profile --job JOB -o P.json` measures the job's model, one layer per signature,
// for every microbatch size the planner will ask for, and records it for each device
// type this machine stands in for; `harp profile check --plan PLAN` runs the plan's
// stages here and prints predicted against measured stage time.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <optional>

#include "cmd_profile.h"
#include "harp/cluster/cluster_io.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/profile/unique_layers.h"
#include "harp/profiler/profiler.h"
#include "harp/runtime/memory.h"
#include "harp/runtime/trainer.h"
#include "table.h"

namespace harp::cli {
namespace {

profiler::MeasureOptions measure_options(bool quick) {
  profiler::MeasureOptions m;
  if (quick) {
    m.warmup = 1;
    m.min_repeats = 3;
    m.max_repeats = 5;
    m.max_seconds = 0.5;
  }
  return m;
}

// The device types to record: those named, else every type of the cluster this machine
// stands in for (the built-in `cpu` and the emulated ones, measured on this CPU).
StatusOr<std::vector<const cluster::DeviceType*>> devices_to_record(const job::Job& job,
                                                                    const std::vector<std::string>& names) {
  std::vector<const cluster::DeviceType*> out;
  for (const std::string& n : names) {
    auto it = job.cluster.devices.find(n);
    if (it == job.cluster.devices.end())
      return invalid_argument("--device " + n + ": not a device type of the cluster in " + job.file +
                              "; use one of its subclusters' devices");
    out.push_back(&it->second);
  }
  if (!names.empty()) return out;
  for (const auto& s : job.cluster.subclusters) {
    const cluster::DeviceType& d = job.cluster.devices.at(s.device);
    const bool stands_in = d.name == "cpu" || d.emulated_slowdown > 1.0;
    bool seen = false;
    for (const auto* o : out) seen = seen || o == &d;
    if (stands_in && !seen) out.push_back(&d);
  }
  if (out.empty())
    return invalid_argument(job.file + ": no device type of the cluster is this machine's (cpu, or one with "
                            "emulated_slowdown); name the one these measurements stand for with --device");
  return out;
}

int run_measure(const ProfileOpts& o, Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("profile", job.status());
  Status trainable = runtime::check_trainable(job->model);
  if (!trainable.ok()) return ctx.fail("profile", trainable);
  auto devices = devices_to_record(*job, o.devices);
  if (!devices.ok()) return ctx.fail("profile", devices.status());
  std::vector<int> sizes = o.microbatch_sizes;
  if (sizes.empty())
    for (int s = 1; s <= job->planner.microbatch_size; ++s)
      if (job->planner.microbatch_size % s == 0) sizes.push_back(s);
  // What measuring holds at once (float32: weights, gradients and the optimizer's two
  // moments of one layer per signature, plus the largest layer's activations), against
  // this machine's memory: a model far too large is refused before anything is built.
  {
    double bytes = 0, acts = 0;
    const int largest = *std::max_element(sizes.begin(), sizes.end());
    for (const auto& g : profile::unique_layers(job->model)) {
      const auto& l = job->model.layers[g.representative];
      bytes += 16.0 * (static_cast<double>(l.param_count) +
                       (l.kind == model::LayerKind::kTail ? static_cast<double>(job->model.gpt.vocab) * job->model.gpt.hidden : 0));
      acts = std::max(acts, 4.0 * l.activation_bytes * largest);  // spec bytes are fp16: x2 for fp32, x2 margin
    }
    const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    if (have > 0 && bytes + acts > 0.8 * have)
      return ctx.fail("profile", failed_precondition(fmt(
          "%s: measuring %s needs about %.1f GiB (one layer per signature with its optimizer state, and "
          "activations at microbatch size %d), this machine has %.1f GiB; profile on a larger machine, or "
          "with smaller --microbatch-sizes", o.job_file.c_str(), job->model.gpt.name.c_str(), (bytes + acts) / (1 << 30),
          largest, have / (1 << 30))));
  }
  profiler::ProfileRequest r;
  r.microbatch_sizes = sizes;
  r.dtype = runtime::torch_dtype(job->training.dtype);
  r.threads = o.threads > 0 ? o.threads : job->training.threads;
  r.deduplicate = !o.per_layer;
  r.options = measure_options(o.quick);
  // The job's training device (auto: the first GPU when libtorch sees CUDA).
  auto compute = runtime::resolve_device(job->training.device, 0);
  if (!compute.ok()) return ctx.fail("profile", compute.status());
  if (Status s = runtime::check_dtype_on_device(job->training.dtype, *compute); !s.ok())
    return ctx.fail("profile", Status(s.code(), o.job_file + ": training." + s.message()));
  r.options.compute = *compute;
  if (compute->is_cuda()) runtime::set_current_device(*compute);
  const auto& m = job->model;
  ctx.err << "harp profile: " << m.gpt.name << " (" << m.num_layers() << " layers, "
          << profile::unique_layers(m).size() << " unique), microbatch sizes";
  for (int s : sizes) ctx.err << " " << s;
  ctx.err << ", " << job->training.dtype << ", " << r.threads << " thread(s), on "
          << (compute->is_cuda() ? "GPU " + compute->str() : std::string("this CPU")) << "\n";
  // This CPU once per distinct slowdown: as itself (factor 1) and as each emulated type,
  // which runs as `harp train --emulate` runs it (sleeping after each compute).
  profile::ProfileDb db;
  std::map<double, profiler::ProfileReport> by_factor;
  profiler::ProfileReport total;
  for (const cluster::DeviceType* d : *devices) {
    const double f = std::max(1.0, d->emulated_slowdown);
    if (!by_factor.count(f)) {
      r.device = d->name;
      r.emulated_slowdown = f;
      if (f > 1) ctx.err << "  (as " << d->name << ", emulated " << fmt("%g", f) << "x slower)\n";
      by_factor[f] = profiler::profile_model(
          m, r, [&ctx](const std::string& line) { ctx.err << "  " << line << "\n" << std::flush; });
      total.measured += by_factor[f].measured;
      total.wall_s += by_factor[f].wall_s;
      total.unique = by_factor[f].unique;
      total.layers = by_factor[f].layers;
    }
    for (profile::ProfileEntry e : by_factor[f].db.entries()) {
      e.key.device = d->name;
      db.put(e);
    }
    profile::DeviceProfile dp = by_factor[f].db.devices().begin()->second;
    dp.device = d->name;
    db.put_device(dp);
  }
  const profiler::ProfileReport& report = total;
  const profile::DeviceProfile& local = by_factor.begin()->second.db.devices().begin()->second;
  Status s = profile::save_profile_db(db, o.output);
  if (!s.ok()) return ctx.fail("profile", s);
  ctx.out << "measured " << report.measured << " layer(s) (" << report.unique << " unique of " << report.layers
          << " per microbatch size and slowdown; a per-layer profiler measures "
          << report.layers * static_cast<int>(sizes.size() * by_factor.size()) << ") in " << fmt_time(report.wall_s) << "; optimizer step "
          << fmt("%.3g", local.optimizer_s_per_param_byte * 1e9) << " ns per parameter byte\n";
  ctx.out << "wrote " << o.output << ":";
  for (const cluster::DeviceType* d : *devices) {
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
  auto checks = profiler::check_plan_stages(*m, *p, torch::kFloat32, measure_options(o.quick),
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
    r = profiler::measure_links(sizes, measure_options(o.quick));
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
