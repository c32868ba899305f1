// Zero-bubble schedules: compute-only lists with split backwards (I, then W later).
//
// Every stage runs its forwards and input gradients in 1F1B's order under its launch
// count N_i (N_i − 1 warm-up forwards), and may hold up to C_i microbatches. For ZB-H1
// and ZB-H2 C_i = N_0, the pipeline's largest launch count, counting a pending W (its
// layers' inputs and output gradients) as a whole microbatch: no stage holds more
// microbatches than the first stage holds under 1F1B (the paper's "same peak memory as
// 1F1B"), and stage i may postpone up to C_i − N_i of its Ws into later gaps. harp-zb
// counts bytes instead (plan_split_times): a pending W what it keeps, and C_i what keeps
// the stage under the pipeline's harp-1f1b peak.
//
// Two constructions:
// - the fixed lag (the paper's ZB-H1 and ZB-H2, Qi et al., ICLR'24): after the warm-up,
//   stage i repeats I(k), W(k − L_i), F, with L_i = C_i − N_i, then drains the rest of
//   its Ws. On equal unit times (F = I = W = 1, free links) ZB-H1's bubble is
//   (S−1)(F + I − W) against 1F1B's (S−1)(F + I + W) (tests/unit/schedule).
// - a list scheduler over time (the Zero Bubble authors' greedy, zb.py, made per stage
//   and per link): at the moment a stage is free, (1) an I whose gradient has arrived
//   runs first (the previous stage waits for it); (2) else the next F, if its input has
//   arrived and both bounds above allow it; (3) else the oldest pending W, by the
//   policy; (4) else it waits for the next arrival. kFillGaps runs a W whenever (3) is
//   reached; kFillFitting only when it ends before the next input the stage knows of, or
//   when only a W can free the next F.
// harp-zb is the best of four candidates on the plan's own stage and link times under
// HARP's launch counts: both policies, the fixed lag, and lag 0 (each W right after its I:
// harp-1f1b with a split backward), the shortest on the generator's clock kept. So it is
// never slower than harp-1f1b on that clock; greedy, not exact (an exact placement is a
// scheduling problem: the authors formulate an ILP).
#pragma once

#include <vector>

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/schedule/action.h"

namespace harp::schedule {

// Per-stage seconds (any one unit) the generator places actions by, and what it may hold.
struct SplitTimes {
  std::vector<double> f, i, w;  // per stage: forward, input gradient, weight gradients
  std::vector<double> link;     // per stage: stage s -> s + 1 one way (the last is unused)
  // Memory per stage, in one unit: what a forward awaiting its I holds, what an I awaiting
  // its W holds, and the most the stage may hold at once (C_i). Empty: counts, 1, 1 and
  // N_0 (zero_bubble_caps).
  std::vector<double> activation, pending_w, hold_limit;
};

// F = I = W = 1, free links: the equal-stage setting of ZB-H1 and ZB-H2.
SplitTimes unit_split_times(int num_stages);
// The plan's times: fwd_s, bwd_s − bwd_weight_s, bwd_weight_s, comm_s; and its memory in
// bytes: activation_bytes, weight_grad_bytes, and as the limit what keeps every stage at
// or under the most any stage holds under `launch_counts` with whole backwards (static +
// N_j x activation, the largest over j, less the stage's static; at least its own N_i x
// activation), and under the stage's usable_memory_bytes when the plan gives it: harp-zb
// never raises the pipeline's peak memory nor outgrows a device. Plans without activation
// bytes (hand-written) get counts.
SplitTimes plan_split_times(const plan::Plan& plan, const std::vector<int>& launch_counts);

enum class WPolicy { kFillGaps, kFillFitting };

struct ZeroBubbleResult {
  Schedule compute;     // F, I and W only
  double makespan = 0;  // on the generator's clock, in the times' unit
};

// The microbatches each stage may hold (C_i above): N_0 everywhere.
std::vector<int> zero_bubble_caps(const std::vector<int>& launch_counts);
// The lags that fill each stage's memory limit in `times` (counts: C_i − N_i), in [0, M].
std::vector<int> memory_lags(const std::vector<int>& launch_counts, const SplitTimes& times, int microbatches);

// The list scheduler. REQUIRES: launch counts as generate_with_launch_counts demands
// them; times sized num_stages, finite and >= 0. InvalidArgument otherwise.
StatusOr<ZeroBubbleResult> generate_zero_bubble(int num_stages, int microbatches,
                                                const std::vector<int>& launch_counts, const SplitTimes& times,
                                                WPolicy policy);

// The fixed-lag construction with lags[i] (C_i − N_i for the paper's; 0: each W right
// after its I). Same requirements, and lags[i] in [0, microbatches].
StatusOr<Schedule> generate_fixed_lag(int num_stages, int microbatches, const std::vector<int>& launch_counts,
                                      const std::vector<int>& lags);
// C_i − N_i: the paper's lags.
std::vector<int> zero_bubble_lags(const std::vector<int>& launch_counts);

// When a compute-only schedule finishes on `times` (each rank in its list order, an
// action once its input has arrived); InvalidArgument if it cannot drain.
StatusOr<double> compute_makespan(const Schedule& compute, const SplitTimes& times);

// What a rank holds at most under its list (lowered or compute-only), in bytes: each
// forward whose backward (B, or I) has not run holds `activation`, each I whose W has not
// run holds `pending_w`. Under B-only lists: the peak in-flight count x `activation`.
double peak_held_bytes(const std::vector<Action>& list, double activation, double pending_w);

// harp-zb: the best of the four candidates above (ties: the first in the order given).
StatusOr<ZeroBubbleResult> generate_best_zero_bubble(int num_stages, int microbatches,
                                                     const std::vector<int>& launch_counts,
                                                     const SplitTimes& times);

}  // namespace harp::schedule
