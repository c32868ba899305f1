// Turns placement decisions into a complete, self-contained Plan: per-stage times from
// the cost model, boundary transfers, all-reduce and optimizer terms, launch counts,
// memory and the closed-form prediction. Every strategy (uniform, harp, homogeneous)
// builds its plan here, so their figures are comparable.
#pragma once

#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/cost/cost_model.h"
#include "harp/plan/plan.h"

namespace harp::planner {

// Where a stage runs: `devices` consecutive devices of subcluster `subcluster` starting
// at node `first_node`, local device `first_local` (a group inside one node, or whole
// nodes), arranged as dp x tp.
struct Placement {
  int subcluster = 0;
  int first_node = 0;
  int first_local = 0;
  int devices = 1;
  int dp = 1, tp = 1;
  int first_layer = 0, last_layer = 0;  // [first, last)

  int last_node(int devices_per_node) const {
    return first_node + (first_local + devices - 1) / devices_per_node;
  }
};

struct BuildOptions {
  int microbatches = 1;
  int microbatch_size = 1;
  plan::ScheduleKind schedule = plan::ScheduleKind::k1F1B;
  std::string strategy;
};

// Builds the plan. Launch counts follow the schedule kind (δ rule with the plan's own
// period for harp-1f1b). Memory is computed but not enforced: check_memory reports it.
plan::Plan build_plan(const cost::CostModel& costs, const std::vector<Placement>& placements,
                      const BuildOptions& options);

// Infeasible with the first stage whose device memory is exceeded (needed vs usable,
// and what would help); ok if every stage fits.
Status check_memory(const cost::CostModel& costs, const plan::Plan& plan);

}  // namespace harp::planner
