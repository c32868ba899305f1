// Plan -> lowered, validated schedule (schedule::lower_plan) -> simulated.
#include "harp/sim/run.h"

#include "harp/schedule/lower_plan.h"

namespace harp::sim {

StatusOr<PlanRun> simulate_plan(const plan::Plan& input, plan::ScheduleKind kind,
                                const SimOptions& options) {
  HARP_ASSIGN_OR_RETURN(schedule::LoweredPlan lowered, schedule::lower_plan(input, kind));
  HARP_RETURN_IF_ERROR(lowered.require_drains());
  plan::Plan p = input;
  for (int i = 0; i < p.num_stages(); ++i) p.stages[i].launch_count = lowered.launch_counts[i];
  PlanRun run;
  run.launch_counts = lowered.launch_counts;
  HARP_ASSIGN_OR_RETURN(run.result, simulate(p, lowered.lowered, options));
  return run;
}

}  // namespace harp::sim
