// Branch and bound over the sorted candidate periods (see cap_search.h for why it is exact).
#include "cap_search.h"

#include <cmath>
#include <limits>

#include "harp/plan/closed_form.h"

namespace harp::planner {

CapSearchResult search_caps(const DpProblem& problem) {
  CapSearchResult result;
  const std::vector<Seconds> caps = candidate_caps(problem);
  const int K = static_cast<int>(caps.size());
  result.caps_total = K;
  if (K == 0) return result;
  const double B1 = problem.B - 1;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> relaxed(K, std::nan(""));
  DpTable table(problem);
  double best = inf;

  BuildOptions build;
  build.microbatches = problem.B;
  build.schedule = problem.harp ? plan::ScheduleKind::kHarp1F1B : plan::ScheduleKind::k1F1B;
  auto keep = [&](std::vector<Placement> pl, double t, double period) {
    if (t < best) {
      best = t;
      result.feasible = true;
      result.placements = std::move(pl);
      result.iteration_s = t;
      result.period_s = period;
    }
  };
  // Runs the DP at caps[i]; records R and updates the best plan from both outcomes.
  auto evaluate = [&](int i) {
    DpOutcome out = table.run(caps[i]);
    ++result.caps_evaluated;
    result.states_visited += out.states;
    result.front_entries += out.entries;
    relaxed[i] = out.relaxed;
    if (out.exact_entry >= 0) keep(table.placements(out.exact_entry), out.exact + B1 * caps[i], caps[i]);
    if (out.relaxed_entry >= 0 && out.relaxed_entry != out.exact_entry) {
      // The relaxed optimum has a smaller period; with its own δ it may need more memory.
      std::vector<Placement> pl = table.placements(out.relaxed_entry);
      plan::Plan p = build_plan(*problem.costs, pl, build);
      if (check_memory(*problem.costs, p).ok()) keep(std::move(pl), p.predicted.iteration_s, p.predicted.period_s);
    }
  };
  auto r_at = [&](int i) {
    if (std::isnan(relaxed[i])) evaluate(i);
    return relaxed[i];
  };

  if (r_at(K - 1) == inf) return result;  // nothing fits even with no cap
  int lo = 0, hi = K - 1;                  // smallest feasible cap
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (r_at(mid) < inf)
      hi = mid;
    else
      lo = mid + 1;
  }
  const double r_floor = relaxed[K - 1];
  int top = K - 1;
  while (top >= lo && B1 * caps[top] + r_floor >= best) --top;

  std::vector<std::pair<int, int>> stack = {{lo, top}};
  while (!stack.empty()) {
    auto [i, j] = stack.back();
    stack.pop_back();
    if (i > j || B1 * caps[i] + r_floor >= best) continue;
    if (B1 * caps[i] + r_at(j) >= best) continue;
    if (i == j) continue;  // r_at(j) ran the DP at caps[j]: its exact plan is considered
    const int mid = i + (j - i) / 2;
    stack.push_back({mid + 1, j});
    stack.push_back({i, mid});
  }
  return result;
}

}  // namespace harp::planner
