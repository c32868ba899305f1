// The one owner of "plan -> checked, lowered schedule": launch counts for the schedule
// kind, the compute-only lists, the lowered lists (SEND/RECV, REDUCE_GRAD, STEP) and
// the strict validator's verdict. The simulator, the runtime and `harp schedule show`
// each call this once, so all three see the same per-rank lists for the same plan.
#pragma once

#include <cstdint>
#include <vector>

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/schedule/action.h"
#include "harp/schedule/validate.h"
#include "harp/schedule/zero_bubble.h"

namespace harp::schedule {

// The most actions a lowered schedule may have (6 per stage and microbatch, 7 with a
// split backward): what
// lowering, validating, simulating and printing do in a few seconds and a few hundred
// MiB (64 stages x 15,000 microbatches; measured: 64 x 65,536 took 10 s and 1 GiB).
inline constexpr std::int64_t kMaxScheduleActions = 6'000'000;

struct LoweredPlan {
  plan::ScheduleKind kind = plan::ScheduleKind::k1F1B;
  std::vector<int> launch_counts;  // N_i per stage
  Schedule compute;                // F and B only (F, I and W for the split kinds)
  Schedule lowered;                // what ranks execute, in order
  ValidationResult check;          // strict (blocking send and receive) matching

  // FailedPrecondition with the validator's grid when the lowered lists do not drain.
  Status require_drains() const;
};

// Lowers `plan` under `kind`. Launch counts stored in the plan are used only when `kind`
// is the plan's own schedule (another kind derives its own: GPipe B, 1F1B min(S-i, B),
// HARP the δ rule with the plan's P). ZB-H1 and ZB-H2 are the paper's fixed-lag
// constructions; harp-zb places its Ws on the plan's stage and link times (zero_bubble.h). InvalidArgument when the counts cannot make a
// schedule; a schedule that does not drain is returned with check.ok == false.
StatusOr<LoweredPlan> lower_plan(const plan::Plan& plan, plan::ScheduleKind kind);
inline StatusOr<LoweredPlan> lower_plan(const plan::Plan& plan) { return lower_plan(plan, plan.schedule); }

// The same for explicit launch counts without a plan (`harp schedule show`); a split
// kind places its W actions by `times` (unit times when null).
// REQUIRES: launch_counts.size() == num_stages.
StatusOr<LoweredPlan> lower_with_launch_counts(int num_stages, int microbatches,
                                               const std::vector<int>& launch_counts,
                                               plan::ScheduleKind kind, const SplitTimes* times = nullptr);

}  // namespace harp::schedule
