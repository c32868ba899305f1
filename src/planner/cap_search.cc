// Branch and bound over the sorted candidate periods (see cap_search.h for why it is exact).
#include "cap_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "harp/plan/closed_form.h"

namespace harp::planner {

CapSearchResult search_caps(const DpProblem& problem, const ProgressFn& progress, int threads) {
  CapSearchResult result;
  const std::vector<Seconds> caps = candidate_caps(problem);
  const int K = static_cast<int>(caps.size());
  result.caps_total = K;
  if (K == 0) return result;
  const double B1 = problem.B - 1;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> relaxed(K, std::nan(""));
  DpTable table(problem, threads);
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
  // `low` is the smallest cap R(caps[i]) will bound: partial plans that cannot beat the
  // best plan with a period of at least caps[low] are dropped (R stays exact below
  // best - (B - 1) caps[low], which is all the bound test needs).
  auto evaluate = [&](int i, int low) {
    const double prune_at = low < 0 ? inf : best - B1 * caps[low];
    DpOutcome out = table.run(caps[i], prune_at);
    ++result.caps_evaluated;
    result.states_visited += out.states;
    result.front_entries += out.entries;
    relaxed[i] = out.relaxed;
    if (progress) progress(caps[i], out.states);
    if (out.exact_entry >= 0) keep(table.placements(out.exact_entry), out.exact + B1 * caps[i], caps[i]);
    if (out.relaxed_entry >= 0 && out.relaxed_entry != out.exact_entry) {
      // The relaxed optimum has a smaller period; with its own δ it may need more memory.
      std::vector<Placement> pl = table.placements(out.relaxed_entry);
      plan::Plan p = build_plan(*problem.costs, pl, build);
      if (check_memory(*problem.costs, p).ok()) keep(std::move(pl), p.predicted.iteration_s, p.predicted.period_s);
    }
  };
  auto r_at = [&](int i, int low = -1) {
    if (std::isnan(relaxed[i])) evaluate(i, low);
    return relaxed[i];
  };

  // No smaller cap can be feasible (min_feasible_period_bound): start there.
  const Seconds floor_cap = min_feasible_period_bound(problem);
  int lo = static_cast<int>(std::lower_bound(caps.begin(), caps.end(), floor_cap) - caps.begin());
  if (lo >= K) return result;
  // Gallop upward: low caps are cheap to evaluate (short stages), high ones are not.
  // Feasibility probes keep one entry per state (DpTable::feasible): much cheaper.
  auto probe = [&](int i) {
    ++result.caps_evaluated;
    return table.feasible(caps[i]);
  };
  int step = 1, hi = lo;
  while (!probe(hi)) {
    if (hi == K - 1) return result;  // nothing fits even with the largest cap
    lo = hi + 1;
    hi = std::min(K - 1, hi + step);
    step *= 2;
  }
  while (lo < hi) {  // smallest feasible cap in [lo, hi]
    const int mid = lo + (hi - lo) / 2;
    if (probe(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  r_at(lo);  // the smallest feasible cap: the first plans, exact and relaxed
  // (B - 1) X alone must stay below the best plan (the paper's cut); R >= 0 below.
  int top = K - 1;
  while (top > lo && B1 * caps[top] >= best) --top;

  std::vector<std::pair<int, int>> stack = {{lo + 1, top}};
  while (!stack.empty()) {
    auto [i, j] = stack.back();
    stack.pop_back();
    if (i > j || B1 * caps[i] >= best) continue;
    if (B1 * caps[i] + r_at(j, i) >= best) continue;
    if (i == j) continue;  // r_at(j) ran the DP at caps[j]: its exact plan is considered
    const int mid = i + (j - i) / 2;
    stack.push_back({mid + 1, j});
    stack.push_back({i, mid});
  }
  return result;
}

}  // namespace harp::planner
