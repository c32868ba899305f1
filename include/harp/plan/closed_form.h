// The closed-form iteration time of DESIGN.md (the planner's objective):
//
//   T = sum_i (t_i + 2 c_i) + (B - 1) * max(max_i t_i, max_i c_i) + max_i (ar_i + opt_i)
//
// The end term pairs each stage's all-reduce with its own optimizer step (a stage steps
// right after its all-reduce), rather than adding the two maxima of different stages.
// with t_i = fwd_i + bwd_i and c_i the one-way transfer to stage i+1. It is exact when
// the schedule hides every transfer but the first microbatch's round trip; it ignores
// launch counts too small to hide the links (the simulator measures that).
#pragma once

#include "harp/plan/plan.h"

namespace harp::plan {

Prediction closed_form(const Plan& plan);

// HARP's δ rule (DESIGN.md): launch counts from the last stage back, N_{S-1} = 1,
// N_i = N_{i+1} + δ_i, δ_i = 1 inside a node, else 1/2/3 for c_i < P/10, c_i < P/2,
// otherwise. Each N_i is clamped to B. `period_s` is the plan's P.
// DESIGN.md and the paper give δ = 1 to every link inside a subcluster; our search space
// also cuts between nodes of one subcluster, whose links can be slow, so the rule
// applies to every link that leaves a node (an intra-node link is fast: δ = 1).
std::vector<int> delta_rule_launch_counts(const Plan& plan, Seconds period_s);
// δ_i of that rule for one link: 1 inside a node (or under standard 1F1B, harp = false),
// else 1 if c < P/10, 2 if c < P/2, otherwise 3. The planner's DP uses this same function.
inline int launch_delta(bool crosses_nodes, Seconds comm_s, Seconds period_s, bool harp = true) {
  if (!harp || !crosses_nodes) return 1;
  return comm_s < period_s / 10 ? 1 : comm_s < period_s / 2 ? 2 : 3;
}

// The launch counts of the kinds with fixed counts: 1F1B and ZB-H1 min(S - i, B); ZB-H2
// min(2 (S - i) - 1, B) (twice 1F1B's in-flight microbatches, less the one the last
// stage never holds); GPipe B. (The δ-rule kinds take 1F1B's here.)
std::vector<int> standard_launch_counts(int num_stages, int microbatches, ScheduleKind kind);

}  // namespace harp::plan
