// `harp schedule show`: the per-rank grid of a generated schedule, its lowered form and
// the validator's verdict.
#include <sstream>

#include "commands.h"
#include "validators.h"
#include "harp/plan/closed_form.h"
#include "harp/schedule/grid.h"
#include "harp/schedule/lower_plan.h"

namespace harp::cli {
namespace {

struct Opts {
  int stages = 0;
  int microbatches = 0;
  std::string kind = "1f1b";
  std::vector<int> launch_counts;
  bool lowered = false;
};

int run_schedule_show(const Opts& o, Context& ctx) {
  plan::ScheduleKind kind;
  plan::parse_schedule_kind(o.kind, &kind);
  std::vector<int> n;
  if (!o.launch_counts.empty()) {
    if (static_cast<int>(o.launch_counts.size()) != o.stages) {
      ctx.err << "harp schedule show: --launch-counts has " << o.launch_counts.size()
              << " values but --stages is " << o.stages << "; give one launch count per stage\n";
      return ctx.rc = kExitUsage;
    }
    n = o.launch_counts;
  } else if (plan::uses_delta_rule(kind)) {
    ctx.err << "harp schedule show: --kind " << o.kind << " needs --launch-counts (the δ rule needs "
               "link times: use `harp simulate --plan` for a plan's own counts)\n";
    return ctx.rc = kExitUsage;
  } else {
    n = plan::standard_launch_counts(o.stages, o.microbatches, kind);
  }
  auto lowered = schedule::lower_with_launch_counts(o.stages, o.microbatches, n, kind);
  if (!lowered.ok()) {
    ctx.err << "harp schedule show: " << lowered.status().message() << "\n";
    return ctx.rc = lowered.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitInput;
  }
  std::ostringstream counts;
  for (size_t i = 0; i < n.size(); ++i) counts << (i ? "," : "") << n[i];
  ctx.out << o.kind << ": " << o.stages << " stages, " << o.microbatches
          << " microbatches, launch counts [" << counts.str() << "]\n\n";
  ctx.out << schedule::format_compute_grid(lowered->compute) << "\n";
  if (o.lowered) ctx.out << schedule::schedule_to_text(lowered->lowered) << "\n";
  const schedule::ValidationResult& strict = lowered->check;
  if (!strict.ok) {
    ctx.err << "harp schedule show: " << lowered->require_drains().message() << "\n";
    return ctx.rc = kExitInput;
  }
  ctx.out << "validator: drains under strict matching (blocking sends and receives) in "
          << strict.steps << " steps; " << lowered->lowered.total_actions() << " actions\n";
  ctx.out << "peak in-flight microbatches per stage:";
  for (int p : strict.peak_inflight) ctx.out << " " << p;
  ctx.out << "\n";
  return kExitOk;
}

}  // namespace

void add_schedule_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("schedule", "Generate and check pipeline schedules");
  cmd->require_subcommand(1, 1);
  auto* show = cmd->add_subcommand("show", "Print the per-rank grid of a schedule");
  auto o = std::make_shared<Opts>();
  show->add_option("--stages", o->stages, "Pipeline stages S")->required()->check(whole(1, 4096));
  show->add_option("--microbatches", o->microbatches, "Microbatches per iteration M")
      ->required()->check(whole(1, 1 << 20));
  show->add_option("--kind", o->kind, "gpipe, 1f1b, harp-1f1b, zb-h1, zb-h2 or harp-zb")
      ->check(CLI::IsMember(plan::schedule_kind_names()))->capture_default_str();
  show->add_option("--launch-counts", o->launch_counts, "Launch count per stage, e.g. 3,2,1")
      ->delimiter(',')->check(whole(1, 1 << 20));
  show->add_flag("--lowered", o->lowered, "Also print the lowered action lists (with SEND/RECV)");
  show->callback([o, &ctx] { ctx.rc = run_schedule_show(*o, ctx); });
}

}  // namespace harp::cli
