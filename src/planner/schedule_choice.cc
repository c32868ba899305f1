// The schedule chosen per plan by simulation under the memory limit (schedule_choice.h).
#include "harp/planner/schedule_choice.h"

#include <algorithm>

#include "harp/common/format.h"
#include "harp/planner/plan_builder.h"
#include "harp/schedule/generators.h"
#include "harp/schedule/lower_plan.h"
#include "harp/schedule/zero_bubble.h"
#include "harp/sim/simulator.h"

namespace harp::planner {
namespace {

// `plan` as run under `kind`: the δ-rule kinds keep the plan's own launch counts (the
// search's), which lower_plan uses only when the kind is the plan's schedule.
plan::Plan under(const plan::Plan& plan, plan::ScheduleKind kind) {
  plan::Plan p = plan;
  if (plan::uses_delta_rule(kind)) p.schedule = kind;
  return p;
}

}  // namespace

const std::vector<plan::ScheduleKind>& auto_schedule_kinds() {
  static const std::vector<plan::ScheduleKind> kinds = {plan::ScheduleKind::k1F1B, plan::ScheduleKind::kHarp1F1B,
                                                        plan::ScheduleKind::kZbH1, plan::ScheduleKind::kZbH2,
                                                        plan::ScheduleKind::kHarpZb};
  return kinds;
}

std::vector<ScheduleOption> weigh_schedules(const plan::Plan& plan, const cost::StageCosts& costs,
                                            const std::vector<plan::ScheduleKind>& kinds) {
  std::vector<ScheduleOption> out;
  for (plan::ScheduleKind kind : kinds) {
    ScheduleOption o;
    o.kind = kind;
    const plan::Plan p = under(plan, kind);
    auto lowered = schedule::lower_plan(p, kind);
    if (!lowered.ok() || !lowered->check.ok) {
      o.why = lowered.ok() ? "does not drain" : lowered.status().message();
      out.push_back(o);
      continue;
    }
    sim::SimOptions so;
    so.record_spans = false;
    auto sim = sim::simulate(p, lowered->lowered, so);
    if (!sim.ok()) {
      o.why = sim.status().message();
      out.push_back(o);
      continue;
    }
    o.simulated_s = sim->iteration_s();
    o.fits = true;
    for (int i = 0; i < p.num_stages(); ++i) {
      const Bytes peak = sim->ranks[i].peak_memory_bytes;
      o.peak_bytes = std::max(o.peak_bytes, peak);
      const int sub = p.stages[i].subcluster;
      if (sub < 0 || !o.fits) continue;
      const Bytes usable = usable_bytes(costs, p.stages[i]);
      if (peak > usable) {
        o.fits = false;
        o.why = "stage " + std::to_string(i) + " needs " + fmt_bytes(peak) + " of " + fmt_bytes(usable);
      }
    }
    out.push_back(o);
  }
  return out;
}

std::optional<ScheduleOption> fastest_fitting(const std::vector<ScheduleOption>& options) {
  std::optional<ScheduleOption> best;
  for (const ScheduleOption& o : options)
    if (o.fits && (!best || o.simulated_s < best->simulated_s)) best = o;
  return best;
}

PairChoice fastest_pair(const std::vector<plan::Plan>& plans, const cost::StageCosts& costs,
                        const std::vector<plan::ScheduleKind>& kinds) {
  PairChoice choice;
  Seconds best = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    std::vector<ScheduleOption> options = weigh_schedules(plans[i], costs, kinds);
    ++choice.weighed;
    const std::optional<ScheduleOption> o = fastest_fitting(options);
    if (o && (choice.plan < 0 || o->simulated_s < best)) {
      best = o->simulated_s;
      choice.plan = static_cast<int>(i);
      choice.options = std::move(options);
    } else if (i == 0 && choice.plan < 0) {
      choice.options = std::move(options);
    }
  }
  return choice;
}

void adopt_schedule(plan::Plan* plan, const ScheduleOption& option) {
  const std::vector<int> counts = schedule::launch_counts_for(under(*plan, option.kind), option.kind);
  plan->schedule = option.kind;
  for (size_t i = 0; i < plan->stages.size(); ++i) plan->stages[i].launch_count = counts[i];
}

std::string describe_options(const std::vector<ScheduleOption>& options) {
  std::string out;
  for (const ScheduleOption& o : options) {
    out += out.empty() ? "" : ", ";
    out += plan::schedule_kind_name(o.kind);
    out += o.fits ? " " + fmt_time(o.simulated_s) : " (" + o.why + ")";
  }
  return out;
}

}  // namespace harp::planner
