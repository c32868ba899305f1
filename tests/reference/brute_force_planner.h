// The slow oracle for the exact planner (harp_search.h): enumerates every plan of the
// search space one by one, scores each with build_plan + check_memory, and keeps the
// cheapest. Exponential in the number of layers and devices; only for small problems.
// It shares no code with the planner's DP (dp_table, cap_search): only the cost source
// (StageCosts) and the plan assembly (build_plan), so both sides see identical numbers.
#pragma once

#include <limits>
#include <vector>

#include "harp/common/units.h"
#include "harp/planner/harp_search.h"
#include "harp/planner/plan_builder.h"
#include "harp/planner/stage_costs.h"

namespace harp::planner::reference {

struct BruteForceResult {
  bool feasible = false;                // some enumerated plan fits in memory
  Seconds iteration_s = std::numeric_limits<double>::infinity();  // its closed-form T
  std::vector<Placement> placements;    // the first cheapest plan found, pipeline order
  std::vector<int> launch_counts;
  // Over every plan regardless of memory: shows whether memory decided the answer.
  Seconds iteration_ignoring_memory_s = std::numeric_limits<double>::infinity();
  long long plans_enumerated = 0;
  long long plans_memory_feasible = 0;
};

// Minimises T over the search space that harp_search.h defines, for `options`
// (microbatches, max_tp, allow_idle_devices, fixed_order, harp_schedule; threads is
// ignored). REQUIRES: options.microbatches >= 1; a small problem (it is exponential).
BruteForceResult brute_force_search(const StageCosts& costs, const SearchOptions& options);

// Every mesh a stage may use on subcluster `sub` when it starts at device `offset`
// (index inside the subcluster) and may take at most `free_devices` devices.
// Exposed for tests of the enumeration itself.
struct MeshShape {
  int devices = 1, dp = 1, tp = 1;
};
std::vector<MeshShape> meshes_at(const StageCosts& costs, const SearchOptions& options, int sub,
                                 int offset, int free_devices);

}  // namespace harp::planner::reference
