// GPipe, 1F1B and HARP's heterogeneity-aware 1F1B as one generator parameterised by the
// launch counts N_i (DESIGN.md "Heterogeneity-aware 1F1B"): the schedules differ only in
// how many forwards each stage issues before its first backward.
#include "harp/schedule/generators.h"

#include <string>

#include "harp/plan/closed_form.h"

namespace harp::schedule {
namespace {

// W = n - 1 warm-up forwards, then F/B pairs while forwards remain, then the drain.
// Both directions run microbatches FIFO, so B(m) always follows F(m) on the stage.
std::vector<Action> stage_order(int stage, int microbatches, int n) {
  std::vector<Action> out;
  out.reserve(2 * static_cast<size_t>(microbatches));
  int f = 0, b = 0;
  for (; f < n - 1; ++f) out.push_back({stage, ActionKind::kF, f});
  while (f < microbatches) {
    out.push_back({stage, ActionKind::kF, f++});
    out.push_back({stage, ActionKind::kB, b++});
  }
  while (b < microbatches) out.push_back({stage, ActionKind::kB, b++});
  return out;
}

Status check_launch_counts(int num_stages, int microbatches, const std::vector<int>& n) {
  if (num_stages < 1)
    return invalid_argument("schedule needs at least one stage, got " +
                            std::to_string(num_stages));
  if (microbatches < 1)
    return invalid_argument("schedule needs at least one microbatch, got " +
                            std::to_string(microbatches));
  if (static_cast<int>(n.size()) != num_stages)
    return invalid_argument("launch counts: got " + std::to_string(n.size()) + " values for " +
                            std::to_string(num_stages) + " stages; give one per stage");
  for (int i = 0; i < num_stages; ++i) {
    if (n[i] < 1 || n[i] > microbatches)
      return invalid_argument("launch count of stage " + std::to_string(i) + " is " +
                              std::to_string(n[i]) + "; it must lie in [1, " +
                              std::to_string(microbatches) + "] (1 to the microbatch count)");
    if (i > 0 && n[i] > n[i - 1])
      return invalid_argument("launch count of stage " + std::to_string(i) + " is " +
                              std::to_string(n[i]) + ", more than stage " + std::to_string(i - 1) +
                              "'s " + std::to_string(n[i - 1]) +
                              "; launch counts must not increase along the pipeline");
  }
  return Status::ok_status();
}

}  // namespace

StatusOr<Schedule> generate_with_launch_counts(int num_stages, int microbatches,
                                               const std::vector<int>& launch_counts) {
  HARP_RETURN_IF_ERROR(check_launch_counts(num_stages, microbatches, launch_counts));
  Schedule s;
  s.num_stages = num_stages;
  s.num_microbatches = microbatches;
  for (int i = 0; i < num_stages; ++i)
    s.actions.push_back(stage_order(i, microbatches, launch_counts[i]));
  return s;
}

Schedule generate_gpipe(int num_stages, int microbatches) {
  StatusOr<Schedule> s = generate_with_launch_counts(
      num_stages, microbatches,
      plan::standard_launch_counts(num_stages, microbatches, plan::ScheduleKind::kGpipe));
  HARP_CHECK(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

Schedule generate_1f1b(int num_stages, int microbatches) {
  StatusOr<Schedule> s = generate_with_launch_counts(
      num_stages, microbatches,
      plan::standard_launch_counts(num_stages, microbatches, plan::ScheduleKind::k1F1B));
  HARP_CHECK(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

std::vector<int> launch_counts_for(const plan::Plan& plan, plan::ScheduleKind kind) {
  if (!plan::uses_delta_rule(kind))
    return plan::standard_launch_counts(plan.num_stages(), plan.microbatches, kind);
  bool all_set = !plan.stages.empty();
  for (const plan::Stage& s : plan.stages) all_set = all_set && s.launch_count > 0;
  if (all_set) {
    std::vector<int> n;
    for (const plan::Stage& s : plan.stages) n.push_back(s.launch_count);
    return n;
  }
  return plan::delta_rule_launch_counts(plan, plan::closed_form(plan).period_s);
}

StatusOr<Schedule> generate_for_plan(const plan::Plan& plan, plan::ScheduleKind kind) {
  return generate_with_launch_counts(plan.num_stages(), plan.microbatches,
                                     launch_counts_for(plan, kind));
}

}  // namespace harp::schedule
