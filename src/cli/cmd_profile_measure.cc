// The measuring half of `harp profile` (built into harp-train, which links libtorch):
// `harp profile --job JOB -o P.json` measures the job's model, one layer per signature,
// for every microbatch size the planner will ask for, and records it for each device
// type this machine stands in for; `harp profile check --plan PLAN` runs the plan's
// stages here and prints predicted against measured stage time.
#include <algorithm>
#include <optional>

#include "cmd_profile.h"
#include "harp/cluster/cluster_io.h"
#include "harp/common/format.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/profiler/profile_job.h"
#include "harp/profiler/reports.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/exec/memory.h"
#include "harp/runtime/nn/trainable.h"

namespace harp::cli {
namespace {

int run_measure(const ProfileOpts& o, Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("profile", job.status());
  profiler::JobProfileRequest r{o.devices, o.microbatch_sizes, o.per_layer, o.quick, o.threads, o.rounds};
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
  profiler::write_stage_checks(*p, checks, ctx.out);
  return kExitOk;
}

int run_links(const ProfileOpts& o, Context& ctx) {
  std::optional<cluster::Cluster> cl;
  if (!o.cluster_file.empty()) {
    auto loaded = cluster::load_cluster(o.cluster_file);
    if (!loaded.ok()) return ctx.fail("profile links", loaded.status());
    cl = std::move(*loaded);
  }
  std::optional<plan::Plan> p;
  if (!o.plan_file.empty()) {
    auto loaded = plan::load_plan(o.plan_file);
    if (!loaded.ok()) return ctx.fail("profile links", loaded.status());
    p = std::move(*loaded);
  }
  const std::vector<double> sizes = profiler::link_sizes(p ? &*p : nullptr);
  runtime::retain_freed_memory();
  runtime::set_compute_threads(1);
  ctx.err << "harp profile links: 2 ranks (threads) over Gloo on 127.0.0.1, " << sizes.size() << " sizes\n";
  profiler::LinkReport r;
  try {
    r = profiler::measure_links(sizes, profiler::measure_options(o.quick));
  } catch (const std::exception& e) {
    return ctx.fail("profile links", io_error(std::string("the measurement failed: ") + e.what()));
  }
  profiler::write_link_report(sizes, r, cl ? &*cl : nullptr, ctx.out);
  return kExitOk;
}

}  // namespace

void add_profiler_commands(CLI::App& root, Context& ctx) {
  (void)root;
  (void)ctx;
  set_profile_hooks(&run_measure, &run_check, &run_links);
}

}  // namespace harp::cli
