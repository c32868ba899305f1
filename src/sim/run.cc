// Plan -> schedule -> lowered -> validated -> simulated, as every front end needs it.
#include "harp/sim/run.h"

#include "harp/schedule/generators.h"
#include "harp/schedule/lowering.h"
#include "harp/schedule/validate.h"

namespace harp::sim {

StatusOr<PlanRun> simulate_plan(const plan::Plan& input, plan::ScheduleKind kind,
                                const SimOptions& options) {
  plan::Plan p = input;
  // Launch counts stored in the plan belong to its own schedule; another kind derives its own.
  if (kind != p.schedule)
    for (auto& s : p.stages) s.launch_count = 0;
  PlanRun run;
  run.launch_counts = schedule::launch_counts_for(p, kind);
  for (int i = 0; i < p.num_stages(); ++i) p.stages[i].launch_count = run.launch_counts[i];
  HARP_ASSIGN_OR_RETURN(schedule::Schedule compute, schedule::generate_for_plan(p, kind));
  HARP_ASSIGN_OR_RETURN(schedule::Schedule lowered, schedule::lower(compute));
  schedule::ValidationResult check = schedule::validate(lowered, schedule::SendMode::kRendezvous);
  if (!check.ok) return failed_precondition("the schedule does not drain:\n" + check.error);
  HARP_ASSIGN_OR_RETURN(run.result, simulate(p, lowered, options));
  return run;
}

}  // namespace harp::sim
