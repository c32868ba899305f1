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
#include "harp/cost/stage_costs.h"

namespace harp::planner::reference {

struct BruteForceResult {
  bool feasible = false;                // some enumerated plan fits in memory
  Seconds iteration_s = std::numeric_limits<double>::infinity();  // its closed-form T
  std::vector<Placement> placements;    // the first cheapest plan found, pipeline order
  std::vector<int> launch_counts;
  // The cheapest plan regardless of memory: shows whether memory decided the answer.
  Seconds iteration_ignoring_memory_s = std::numeric_limits<double>::infinity();
  std::vector<int> launch_counts_ignoring_memory;
  long long plans_enumerated = 0;  // a plan reachable in several orders counts once per order
  long long plans_memory_feasible = 0;
  // Whether the `probe` plan passed to brute_force_search was among those enumerated
  // (so it lies in the search space), and whether it fits in memory.
  bool probe_enumerated = false;
  bool probe_fits = false;
};

// Minimises T over the search space that harp_search.h defines, for `options`
// (microbatches, max_tp, allow_idle_devices, fixed_order, schedule, recompute: every
// combination of the stages' modes; mixed_stages: every mixed stage; progress is
// never called). When `probe` is given, also reports whether that exact plan is enumerated.
// REQUIRES: options.microbatches >= 1; a small problem (it is exponential).
BruteForceResult brute_force_search(const StageCosts& costs, const SearchOptions& options,
                                    const std::vector<Placement>* probe = nullptr);

// The joint oracle of `harp plan --schedule`: every plan of the same search space (each
// built with `options.schedule`'s launch counts, as the search builds them), run under
// every kind of `kinds` (the δ-rule kinds on those counts), each pair lowered and
// simulated here; a pair counts when it drains and every stage's simulated peak fits its
// devices' usable memory. The simulator judges, as the planner's schedule choice does,
// but over every plan, not only the one the closed form picked.
struct JointResult {
  bool feasible = false;
  Seconds simulated_s = std::numeric_limits<double>::infinity();  // the best pair's
  plan::ScheduleKind kind = plan::ScheduleKind::kHarp1F1B;
  std::vector<Placement> placements;
  // Every fitting pair's simulated time, ascending: a pair the planner picks must be one.
  std::vector<Seconds> times;
  long long pairs_simulated = 0;
};
JointResult brute_force_schedules(const StageCosts& costs, const SearchOptions& options,
                                  const std::vector<plan::ScheduleKind>& kinds);

// Every mesh a stage may use on subcluster `sub` when it starts at device `offset`
// (index inside the subcluster) and may take at most `free_devices` devices.
// Exposed for tests of the enumeration itself.
struct MeshShape {
  int devices = 1, dp = 1, tp = 1;
};
std::vector<MeshShape> meshes_at(const StageCosts& costs, const SearchOptions& options, int sub,
                                 int offset, int free_devices);
// The same shapes without the even split's rule (dp divides the microbatch, times for
// microbatch_size / dp): a part of a mixed stage, whose replicas take uneven shares.
std::vector<MeshShape> shapes_at(const StageCosts& costs, const SearchOptions& options, int sub, int offset,
                                 int free_devices, bool even_split);

}  // namespace harp::planner::reference
