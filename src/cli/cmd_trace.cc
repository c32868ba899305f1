// `harp trace compare PREDICTED MEASURED [--svg FILE]`: a simulated trace (harp simulate
// --trace) and a measured one (harp train --trace-steps, OUT/trace.json) side by side per
// stage, with the iteration time error, and drawn one above the other. Both are read with
// the one timeline reader.
// `harp trace runs DIR... [--baseline NAME]`: training runs (each DIR holds the
// summary.json harp train writes) in one table: predicted and measured iteration, the
// error, and the speedup over a baseline run, measured and predicted.
#include <cmath>

#include "commands.h"
#include "harp/common/document.h"
#include "harp/sim/curves.h"
#include "validators.h"
#include "harp/schedule/timeline.h"
#include "harp/sim/run_check.h"
#include "harp/sim/svg.h"
#include "harp/common/table.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string predicted, measured, svg_file;
  bool json = false;
};

StatusOr<schedule::Timeline> timeline_of(const std::string& file) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  HARP_ASSIGN_OR_RETURN(schedule::Timeline t, schedule::timeline_from_trace(doc, file));
  if (t.events.empty())
    return invalid_argument(file + ": the trace has no events; trace at least one step (harp train "
                            "--trace-steps 3) or simulate with --trace");
  return t;
}

StatusOr<schedule::TimelineFigures> figures_of(const schedule::Timeline& t) { return schedule::timeline_figures(t); }

std::string pct(double error) { return std::isfinite(error) ? fmt("%+.0f%%", 100 * error) : "-"; }

std::string cell(const Json& f) {
  return fmt_time(f["predicted_s"]) + " / " + fmt_time(f["measured_s"]) + " (" + pct(f["error"]) + ")";
}

int run_compare(const Opts& o, Context& ctx) {
  auto predicted_t = timeline_of(o.predicted);
  if (!predicted_t.ok()) return ctx.fail("trace compare", predicted_t.status());
  auto measured_t = timeline_of(o.measured);
  if (!measured_t.ok()) return ctx.fail("trace compare", measured_t.status());
  auto predicted = figures_of(*predicted_t);
  if (!predicted.ok()) return ctx.fail("trace compare", predicted.status());
  auto measured = figures_of(*measured_t);
  if (!measured.ok()) return ctx.fail("trace compare", measured.status());
  if (!o.svg_file.empty()) {
    const std::string svg = sim::svg_timelines({{"predicted: " + o.predicted, *predicted_t},
                                                {"measured: " + o.measured, *measured_t}},
                                               "predicted (above) and measured (below), one time axis");
    if (Status s = write_text_file_atomic(o.svg_file, svg); !s.ok()) return ctx.fail("trace compare", s);
  }
  auto cmp = schedule::compare_timelines(*predicted, *measured);
  if (!cmp.ok()) return ctx.fail("trace compare", cmp.status());
  if (o.json) {
    ctx.out << cmp->dump(2) << "\n";
    return kExitOk;
  }
  Table t({"stage", "compute (F+B)", "of it fixed per call", "waiting for input", "idle", "all-reduce + step"});
  for (const Json& s : (*cmp)["stages"]) {
    const Json& fixed = s["fixed"]["predicted_s"];
    t.add({s["name"].get<std::string>(), cell(s["compute"]),
           fixed.is_null() ? "-" : fmt("%+.2f ms / -", 1e3 * fixed.get<double>()), cell(s["wait"]), cell(s["idle"]),
           cell(s["end"])});
  }
  ctx.out << "predicted / measured (error) per iteration, measured over " << (*cmp)["measured_steps"]
          << " traced step(s); \"of it fixed per call\": the part of the predicted compute that is the stage's "
             "fixed cost per forward and backward call (the profile's stage_fixed; a measured trace cannot tell it "
             "apart)\n\n";
  t.print(ctx.out);
  const Json& it = (*cmp)["iteration"];
  ctx.out << "\niteration: predicted " << fmt_time(it["predicted_s"]) << ", measured " << fmt_time(it["measured_s"])
          << ", error " << pct(it["error"]) << "\n";
  return kExitOk;
}

struct RunsOpts {
  std::vector<std::string> dirs;
  std::string baseline;
  std::string check;  // the run that must win
  double min_speedup = 1.0, max_error = 0;
  std::string svg_file;  // the runs' curves
};

int run_runs(const RunsOpts& o, Context& ctx) {
  auto rows = sim::load_runs(o.dirs);
  if (!rows.ok()) return ctx.fail("trace runs", rows.status());
  if (Status s = sim::write_run_table(*rows, o.baseline, ctx.out); !s.ok()) return ctx.fail("trace runs", s);
  if (!o.svg_file.empty()) {
    std::vector<sim::RunCurves> curves;
    for (const std::string& dir : o.dirs) {
      auto c = sim::load_curves(dir);
      if (!c.ok()) return ctx.fail("trace runs", c.status());
      curves.push_back(std::move(*c));
    }
    if (Status s = write_text_file_atomic(o.svg_file, sim::curves_svg(curves, "training curves")); !s.ok())
      return ctx.fail("trace runs", s);
    ctx.out << "curves: " << o.svg_file << "\n";
  }
  if (o.check.empty() && o.max_error <= 0) return kExitOk;
  const Status s = sim::check_runs(*rows, {o.check, o.min_speedup, o.max_error});
  if (s.code() == StatusCode::kInvalidArgument) return ctx.fail("trace runs", s);
  if (!s.ok()) {
    ctx.err << "harp trace runs: " << s.message() << "\n";
    return kExitCheck;
  }
  ctx.out << "check: ";
  if (!o.check.empty()) ctx.out << o.check << fmt(" at least %.2fx over every baseline, measured", o.min_speedup);
  if (o.max_error > 0) ctx.out << (o.check.empty() ? "" : "; ") << fmt("every prediction within ±%.0f%%", 100 * o.max_error);
  ctx.out << ": holds\n";
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
  compare->add_option("--svg", o->svg_file, "Also draw both timelines, predicted above measured");
  compare->callback([o, &ctx] { ctx.rc = run_compare(*o, ctx); });
  auto* runs = cmd->add_subcommand("runs", "Training runs side by side: predicted, measured, speedup");
  auto r = std::make_shared<RunsOpts>();
  runs->add_option("dirs", r->dirs, "Run folders (harp train --out), each with its summary.json")->required();
  runs->add_option("--baseline", r->baseline, "The run the speedups are over (default: the uniform plan's)");
  runs->add_option("--check", r->check, "Require this run to beat every baseline by --min-speedup (exit 4 if not)");
  runs->add_option("--min-speedup", r->min_speedup, "With --check: the speedup required, measured")
      ->check(real(1, 100));
  runs->add_option("--max-error", r->max_error, "Require every prediction within this fraction of its measurement")
      ->check(real(0, 10));
  runs->add_option("--svg", r->svg_file,
                   "Also draw the runs' curves (loss, validation loss, tokens/s, iteration time against step)");
  runs->callback([r, &ctx] { ctx.rc = run_runs(*r, ctx); });
}

}  // namespace harp::cli
