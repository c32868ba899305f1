// `harp simulate --plan FILE`: generate, lower, validate and simulate a plan's schedule;
// print the prediction next to the closed form, optionally write a trace and an SVG.
#include "commands.h"
#include "harp/common/document.h"
#include "harp/plan/closed_form.h"
#include "harp/plan/plan_io.h"
#include "harp/sim/run.h"
#include "harp/sim/svg.h"
#include "harp/sim/trace.h"
#include "harp/common/table.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string plan_file;
  std::string schedule;
  std::string trace_file;
  std::string svg_file;
  bool json = false;
};

int run_simulate(const Opts& o, Context& ctx) {
  // Checked before any work: an output that is the plan would destroy it.
  for (const auto& [flag, file] : {std::pair{"--trace", o.trace_file}, {"--svg", o.svg_file}})
    if (!file.empty())
      if (Status s = check_output_path(file, {o.plan_file}, flag); !s.ok()) return ctx.fail("simulate", s);
  auto p = plan::load_plan(o.plan_file);
  if (!p.ok()) return ctx.fail("simulate", p.status());
  plan::ScheduleKind kind = p->schedule;
  if (!o.schedule.empty()) plan::parse_schedule_kind(o.schedule, &kind);
  auto run = sim::simulate_plan(*p, kind);
  if (!run.ok()) return ctx.fail("simulate", run.status());
  const std::vector<int>& counts = run->launch_counts;
  const sim::SimResult* r = &run->result;
  for (int i = 0; i < p->num_stages(); ++i) p->stages[i].launch_count = counts[i];
  const plan::Prediction cf = plan::closed_form(*p);

  if (!o.trace_file.empty()) {
    Status s = write_text_file_atomic(o.trace_file, sim::chrome_trace(*r, *p).dump() + "\n");
    if (!s.ok()) return ctx.fail("simulate", s);
  }
  if (!o.svg_file.empty()) {
    std::string title = o.plan_file + " — " + plan::schedule_kind_name(kind);
    Status s = write_text_file_atomic(o.svg_file, sim::svg_timeline(*r, *p, title));
    if (!s.ok()) return ctx.fail("simulate", s);
  }

  if (o.json) {
    Json j;
    j["schedule"] = plan::schedule_kind_name(kind);
    j["iteration_s"] = r->iteration_s();
    j["closed_form_s"] = cf.iteration_s;
    j["period_s"] = cf.period_s;
    j["bubble_fraction"] = r->bubble_fraction;
    j["microbatches"] = p->microbatches;
    j["actions"] = r->actions_executed;
    Json stages = Json::array();
    for (int i = 0; i < p->num_stages(); ++i) {
      const auto& rs = r->ranks[i];
      stages.push_back({{"stage", i},
                        {"launch_count", counts[i]},
                        {"peak_inflight", rs.peak_inflight},
                        {"busy_s", ns_to_s(rs.busy_ns)},
                        {"busy_fraction", r->iteration_ns > 0 ? double(rs.busy_ns) / r->iteration_ns : 0.0},
                        {"finish_s", ns_to_s(rs.finish_ns)},
                        {"peak_memory_bytes", rs.peak_memory_bytes}});
    }
    j["stages"] = stages;
    ctx.out << j.dump(2) << "\n";
    return kExitOk;
  }

  ctx.out << "plan " << o.plan_file << ": " << p->num_stages() << " stages, " << p->microbatches
          << " microbatches, schedule " << plan::schedule_kind_name(kind) << "\n\n";
  Table t({"stage", "where", "N", "fwd", "bwd", "comm", "busy", "peak in-flight", "peak memory"});
  for (int i = 0; i < p->num_stages(); ++i) {
    const auto& s = p->stages[i];
    const auto& rs = r->ranks[i];
    t.add({std::to_string(i), s.subcluster_name.empty() ? "-" : s.subcluster_name,
           std::to_string(counts[i]), fmt_time(s.fwd_s), fmt_time(s.bwd_s),
           i + 1 < p->num_stages() ? fmt_time(s.comm_s) : "-",
           fmt("%.1f%%", r->iteration_ns > 0 ? 100.0 * rs.busy_ns / r->iteration_ns : 0.0),
           std::to_string(rs.peak_inflight),
           rs.peak_memory_bytes > 0 ? fmt_bytes(rs.peak_memory_bytes) : "-"});
  }
  t.print(ctx.out);
  ctx.out << "\nsimulated iteration: " << fmt_time(r->iteration_s()) << "   closed form: "
          << fmt_time(cf.iteration_s) << " ("
          << fmt("%+.2f%%", cf.iteration_s > 0 ? 100.0 * (r->iteration_s() / cf.iteration_s - 1) : 0.0)
          << ")   bubble: " << fmt("%.1f%%", 100 * r->bubble_fraction) << "   period P: "
          << fmt_time(cf.period_s) << "\n";
  ctx.out << "validator: drains under strict matching; " << r->actions_executed << " actions\n";
  if (!o.trace_file.empty()) ctx.out << "trace: " << o.trace_file << " (open in ui.perfetto.dev or chrome://tracing)\n";
  if (!o.svg_file.empty()) ctx.out << "timeline: " << o.svg_file << "\n";
  return kExitOk;
}

}  // namespace

void add_simulate_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("simulate", "Simulate a plan's pipeline schedule");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--plan", o->plan_file, "Plan file (JSON)")->required();
  cmd->add_option("--schedule", o->schedule, "Override the plan's schedule: gpipe, 1f1b, harp-1f1b, zb-h1, zb-h2, harp-zb")
      ->check(CLI::IsMember(plan::schedule_kind_names()));
  cmd->add_option("--trace", o->trace_file, "Write a Chrome/Perfetto trace here");
  cmd->add_option("--svg", o->svg_file, "Write an SVG timeline here");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the table");
  cmd->callback([o, &ctx] { ctx.rc = run_simulate(*o, ctx); });
}

}  // namespace harp::cli
