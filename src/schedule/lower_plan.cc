// Plan -> launch counts -> compute lists -> lowered lists -> strict validation.
#include "harp/schedule/lower_plan.h"

#include "harp/schedule/generators.h"
#include "harp/schedule/lowering.h"

namespace harp::schedule {

Status LoweredPlan::require_drains() const {
  if (check.ok) return Status();
  return failed_precondition(std::string("the ") + plan::schedule_kind_name(kind) +
                             " schedule does not drain under strict matching:\n" + check.error);
}

StatusOr<LoweredPlan> lower_with_launch_counts(int num_stages, int microbatches,
                                               const std::vector<int>& launch_counts,
                                               plan::ScheduleKind kind, const SplitTimes* times) {
  // Bounded work before any allocation that grows with the schedule: each stage has at
  // most six actions per microbatch (F, B and a send and a receive each way), seven
  // with a split backward (I and W for B).
  const bool split = plan::splits_backward(kind);
  const std::int64_t actions = (split ? 7ll : 6ll) * num_stages * microbatches;
  if (actions > kMaxScheduleActions)
    return invalid_argument(std::to_string(num_stages) + " stages x " + std::to_string(microbatches) +
                            " microbatches make up to " + std::to_string(actions) + " actions, over the limit of " +
                            std::to_string(kMaxScheduleActions) +
                            "; use fewer stages or microbatches");
  LoweredPlan out;
  out.kind = kind;
  out.launch_counts = launch_counts;
  if (kind == plan::ScheduleKind::kZbH1 || kind == plan::ScheduleKind::kZbH2) {
    HARP_ASSIGN_OR_RETURN(out.compute, generate_fixed_lag(num_stages, microbatches, launch_counts,
                                                          zero_bubble_lags(launch_counts)));
  } else if (split) {
    const SplitTimes unit = unit_split_times(num_stages);
    HARP_ASSIGN_OR_RETURN(ZeroBubbleResult zb, generate_best_zero_bubble(num_stages, microbatches, launch_counts,
                                                                         times != nullptr ? *times : unit));
    out.compute = std::move(zb.compute);
  } else {
    HARP_ASSIGN_OR_RETURN(out.compute, generate_with_launch_counts(num_stages, microbatches, launch_counts));
  }
  HARP_ASSIGN_OR_RETURN(out.lowered, lower(out.compute));
  out.check = validate(out.lowered, SendMode::kRendezvous);
  return out;
}

StatusOr<LoweredPlan> lower_plan(const plan::Plan& input, plan::ScheduleKind kind) {
  // Only harp-zb places its W actions by the plan's times; ZB-H1/H2 are the paper's.
  plan::Plan p = input;
  if (kind != input.schedule)
    for (auto& s : p.stages) s.launch_count = 0;
  const std::vector<int> counts = launch_counts_for(p, kind);
  const SplitTimes times = plan_split_times(p, counts);
  const SplitTimes* own = kind == plan::ScheduleKind::kHarpZb ? &times : nullptr;
  return lower_with_launch_counts(p.num_stages(), p.microbatches, counts, kind, own);
}

}  // namespace harp::schedule
