// `harp trace compare PREDICTED MEASURED`: a simulated trace (harp simulate --trace) and a
// measured one (harp train --trace-steps, OUT/trace.json) side by side per stage, with
// the iteration time error. Both are read with the one timeline reader.
#include <cmath>

#include "commands.h"
#include "harp/schedule/timeline.h"
#include "table.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string predicted, measured;
  bool json = false;
};

StatusOr<schedule::TimelineFigures> figures_of(const std::string& file) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  HARP_ASSIGN_OR_RETURN(schedule::Timeline t, schedule::timeline_from_trace(doc, file));
  if (t.events.empty())
    return invalid_argument(file + ": the trace has no events; trace at least one step (harp train "
                            "--trace-steps 3) or simulate with --trace");
  return schedule::timeline_figures(t);
}

std::string pct(double error) { return std::isfinite(error) ? fmt("%+.0f%%", 100 * error) : "-"; }

std::string cell(const Json& f) {
  return fmt_time(f["predicted_s"]) + " / " + fmt_time(f["measured_s"]) + " (" + pct(f["error"]) + ")";
}

int run_compare(const Opts& o, Context& ctx) {
  auto predicted = figures_of(o.predicted);
  if (!predicted.ok()) return ctx.fail("trace compare", predicted.status());
  auto measured = figures_of(o.measured);
  if (!measured.ok()) return ctx.fail("trace compare", measured.status());
  auto cmp = schedule::compare_timelines(*predicted, *measured);
  if (!cmp.ok()) return ctx.fail("trace compare", cmp.status());
  if (o.json) {
    ctx.out << cmp->dump(2) << "\n";
    return kExitOk;
  }
  Table t({"stage", "compute (F+B)", "waiting for input", "idle", "all-reduce + step"});
  for (const Json& s : (*cmp)["stages"])
    t.add({s["name"].get<std::string>(), cell(s["compute"]), cell(s["wait"]), cell(s["idle"]), cell(s["end"])});
  ctx.out << "predicted / measured (error) per iteration, measured over " << (*cmp)["measured_steps"]
          << " traced step(s)\n\n";
  t.print(ctx.out);
  const Json& it = (*cmp)["iteration"];
  ctx.out << "\niteration: predicted " << fmt_time(it["predicted_s"]) << ", measured " << fmt_time(it["measured_s"])
          << ", error " << pct(it["error"]) << "\n";
  return kExitOk;
}

}  // namespace

void add_trace_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("trace", "Read Chrome traces of predicted and measured runs");
  cmd->require_subcommand(1, 1);
  auto* compare = cmd->add_subcommand("compare", "Predicted against measured, per stage");
  auto o = std::make_shared<Opts>();
  compare->add_option("predicted", o->predicted, "Trace from harp simulate --trace")->required();
  compare->add_option("measured", o->measured, "Trace from harp train --trace-steps (OUT/trace.json)")->required();
  compare->add_flag("--json", o->json, "Print JSON instead of a table");
  compare->callback([o, &ctx] { ctx.rc = run_compare(*o, ctx); });
}

}  // namespace harp::cli
