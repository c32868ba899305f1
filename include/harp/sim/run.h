// One call from a plan to its simulated timeline: generate the schedule, lower it,
// prove it drains under the strict matching rules, simulate it.
#pragma once

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/sim/simulator.h"

namespace harp::sim {

struct PlanRun {
  std::vector<int> launch_counts;
  SimResult result;
};

// `kind` overrides the plan's schedule; launch counts stored in the plan are used only
// when `kind` is the plan's own schedule. FailedPrecondition with the validator's report
// if the schedule does not drain.
StatusOr<PlanRun> simulate_plan(const plan::Plan& plan, plan::ScheduleKind kind,
                                const SimOptions& options = {});

}  // namespace harp::sim
