// What `harp plan` prints: the chosen plan (its stages, the predicted iteration, the
// search's statistics) and, with --compare, every strategy side by side on the winning
// candidate with its simulated iteration against the lower bound. As text or JSON.
#pragma once

#include <ostream>

#include "harp/common/document.h"
#include "harp/planner/plan_job.h"

namespace harp::planner {

// The plan's stages table, its predicted iteration and the search's statistics.
// REQUIRES: c.result.feasible.
void write_plan_report(const PlanOutcome& c, std::ostream& out);
// The plan's JSON with the search's counts under "search". REQUIRES: c.result.feasible.
Json plan_report_json(const PlanOutcome& c);

// c.compared (PlanRequest::compare): each strategy's stages, prediction, simulated
// iteration, ratio to the lower bound and to harp's; the infeasible ones with why.
void write_compare_report(const PlanOutcome& c, std::ostream& out);
Json compare_report_json(const PlanOutcome& c);

}  // namespace harp::planner
