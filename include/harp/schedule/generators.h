// Schedule generators: compute-only action lists (F and B) per stage.
//
// All three share one order, parameterised by the launch count N_i (forwards stage i
// has issued when its first backward is due; W_i = N_i - 1 warm-up forwards): W_i
// forwards, then alternate one forward and one backward until forwards run out, then
// the remaining backwards. GPipe is N_i = B, standard 1F1B is N_i = min(S - i, B),
// HARP's 1F1B takes N from the δ rule (plan/closed_form.h) or from the caller.
#pragma once

#include <vector>

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/schedule/action.h"

namespace harp::schedule {

// REQUIRES: launch_counts.size() == num_stages, each in [1, microbatches], and
// non-increasing along the pipeline (checked; InvalidArgument says which stage).
StatusOr<Schedule> generate_with_launch_counts(int num_stages, int microbatches,
                                               const std::vector<int>& launch_counts);

Schedule generate_gpipe(int num_stages, int microbatches);
Schedule generate_1f1b(int num_stages, int microbatches);

// Launch counts the plan's schedule uses: GPipe B; 1F1B and ZB-H1 min(S-i, B); ZB-H2
// min(2(S-i)-1, B); harp-1f1b and harp-zb the stages' launch_count fields when all are
// set, else the δ rule with the plan's P.
std::vector<int> launch_counts_for(const plan::Plan& plan, plan::ScheduleKind kind);

// Generates the compute-only schedule of `plan` under `kind` (the F/B kinds; the
// split-backward kinds come from zero_bubble.h through lower_plan.h).
StatusOr<Schedule> generate_for_plan(const plan::Plan& plan, plan::ScheduleKind kind);

}  // namespace harp::schedule
