// HARP's planner, made exact (DESIGN.md, Planner; docs/planner.md): the plan that
// minimises
//
//   T = Σ_i (t_i + 2 c_i) + (B − 1) · P + max_i (ar_i + opt_i),  P = max(max t_i, max c_i)
//
// over the search space below, with launch counts from the δ rule evaluated with the
// plan's own P and every device's memory checked with its stage's launch count.
//
// Search space: a pipeline of stages over contiguous layer ranges; stages follow the
// subcluster order (fixed, or every linked order); the stages of one subcluster take its
// devices consecutively from the highest id down (the tail-most stage gets the highest
// ids; idle devices, when allowed, are the lowest ids); a stage's mesh is a power-of-two
// group inside one node or whole nodes; its (dp, tp) shape has tp a power of two inside a
// node, dp dividing the microbatch size, and times available from the cost source; each
// stage's recomputation is one of SearchOptions::recompute.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/planner/plan_builder.h"
#include "harp/cost/stage_costs.h"

namespace harp::planner {

// Called during long searches: the cap (candidate period) just evaluated and the
// number of DP states it filled.
using ProgressFn = std::function<void(Seconds cap, long long states)>;

struct SearchOptions {
  int microbatches = 8;             // B
  int max_tp = 0;                   // 0: up to devices_per_node (and the cost source)
  bool allow_idle_devices = false;  // false: every device is used (the paper's rule)
  bool fixed_order = true;          // false: also search the order of subclusters
  // kHarp1F1B: launch counts from the δ rule; k1F1B: δ = 1 everywhere (standard
  // 1F1B). GPipe is not searched (its launch count B rarely fits memory).
  plan::ScheduleKind schedule = plan::ScheduleKind::kHarp1F1B;
  // run_strategy's harp strategy only. false: search as for standard 1F1B (the schedule
  // out of the loop), then give the placements found HARP's launch counts (the joint
  // planning ablation: the paper's Fig. 11b).
  bool schedule_in_search = true;
  // The recomputation each stage may use (common/recompute.h). {kNone}: today's search;
  // one mode: every stage uses it; several: the search picks one per stage, jointly with
  // the cuts, meshes and launch counts (each stage's time against its memory).
  std::vector<Recompute> recompute = {Recompute::kNone};
  // The ZeRO levels a stage with dp > 1 may use (runtime/exec/zero.h): {0}: none; one
  // level: every such stage; several: the search picks per stage (a mesh per level).
  std::vector<int> zero = {0};
  // Also search mixed stages (cost/mixed_stage.h): a stage whose data-parallel replicas
  // are of two device types, the rest of one subcluster's devices and the first of the
  // next one's, each taking a share of every microbatch by its speed. Only when every
  // device is used (allow_idle_devices false).
  bool mixed_stages = false;
  // Also return up to this many distinct plans the search met on its way (each period's
  // best that fits), fastest closed form first: the plans `--schedule` weighs, since a
  // split schedule may make another period's best the fastest (schedule_choice.h).
  int candidates = 0;
  // Cores the search uses (0: every core): subcluster orders side by side, or, with one
  // order, the states of each layer of its DP. The answer does not depend on it.
  int threads = 0;
  ProgressFn progress;              // optional
};

// The ZeRO levels a stage of `dp` replicas may take: the options', or {0} when dp is 1.
inline std::vector<int> zero_levels(const SearchOptions& options, int dp) {
  return dp > 1 ? options.zero : std::vector<int>{0};
}
// A planner.zero policy: "0", "1", "2" (every stage with dp > 1) or "auto" (0 or 1 per
// stage: in a pipeline ZeRO-2's peak is ZeRO-1's, runtime.md); false if unknown.
bool parse_zero_policy(const std::string& policy, std::vector<int>* levels);

struct SearchStats {
  double wall_s = 0;
  long long caps_total = 0;      // distinct candidate periods
  long long caps_evaluated = 0;  // candidate periods evaluated (probes and full DPs)
  long long dp_runs = 0;         // DP runs (an evaluation may take several tight runs)
  long long states_visited = 0;  // DP states with a non-empty front
  long long front_entries = 0;   // Pareto entries created
  int orders_tried = 0;
};

struct SearchResult {
  bool feasible = false;
  std::vector<Placement> placements;  // pipeline order
  std::vector<int> launch_counts;
  plan::Plan plan;                    // built once from the placements (when feasible)
  // SearchOptions::candidates > 0: the plans met, `plan` first, by closed-form T.
  std::vector<plan::Plan> candidates;
  Seconds iteration_s = 0;            // T of the plan
  Seconds period_s = 0;               // its P
  SearchStats stats;
  // When infeasible: which resource is short and by how much, and what would help.
  std::string infeasible_reason;
};

// Searching the subcluster order (fixed_order false) tries C! orders: at most this many.
inline constexpr int kMaxOrderedSubclusters = 8;
// InvalidArgument naming the limit when `fixed_order` is false on a larger cluster.
Status check_order_search(const cluster::Cluster& cluster, bool fixed_order);

// REQUIRES: options.microbatches >= 1. Returns an error only for a malformed problem;
// an infeasible one is a result with feasible == false.
StatusOr<SearchResult> search_pipeline(const StageCosts& costs, const SearchOptions& options);

}  // namespace harp::planner
