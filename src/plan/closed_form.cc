#include "harp/plan/closed_form.h"

#include <algorithm>

namespace harp::plan {

Prediction closed_form(const Plan& plan) {
  Prediction p;
  Seconds max_t = 0, max_c = 0, compute_sum = 0;
  for (const auto& s : plan.stages) {
    p.round_trip_s += s.compute_s() + 2 * s.comm_s;
    max_t = std::max(max_t, s.compute_s());
    max_c = std::max(max_c, s.comm_s);
    p.end_s = std::max(p.end_s, s.allreduce_s + s.optimizer_s);
    compute_sum += s.compute_s();
  }
  p.period_s = std::max(max_t, max_c);
  p.steady_s = (plan.microbatches - 1) * p.period_s;
  p.iteration_s = p.round_trip_s + p.steady_s + p.end_s;
  const double ranks = static_cast<double>(plan.stages.size());
  p.bubble_fraction =
      p.iteration_s > 0 ? 1.0 - plan.microbatches * compute_sum / (ranks * p.iteration_s) : 0.0;
  return p;
}

std::vector<int> delta_rule_launch_counts(const Plan& plan, Seconds period_s) {
  const int S = plan.num_stages();
  std::vector<int> n(S, 1);
  for (int i = S - 2; i >= 0; --i) {
    const Stage& s = plan.stages[i];
    n[i] = n[i + 1] + launch_delta(s.crosses_nodes, s.comm_s, period_s);
  }
  for (auto& v : n) v = std::min(v, std::max(plan.microbatches, 1));
  return n;
}

std::vector<int> standard_launch_counts(int num_stages, int microbatches, ScheduleKind kind) {
  std::vector<int> n(num_stages);
  for (int i = 0; i < num_stages; ++i)
    n[i] = kind == ScheduleKind::kGpipe  ? microbatches
           : kind == ScheduleKind::kZbH2 ? std::min(2 * (num_stages - i) - 1, microbatches)
                                         : std::min(num_stages - i, microbatches);
  return n;
}

}  // namespace harp::plan
