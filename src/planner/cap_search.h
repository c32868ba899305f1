// Branch and bound over candidate periods for the exact search (internal).
//
// R(X) = min (Σ(t + 2c) + max(ar + opt)) over plans with every t, c <= X, δ from X, is
// non-increasing in X (a larger cap only relaxes). Any plan whose period P lies in
// [X_i, X_j] costs at least (B - 1) X_i + R(X_j), so an interval of caps whose bound
// reaches the best plan found is dropped whole; a single cap left standing is solved
// exactly (some t or c equal to it). Each DP run also yields an incumbent: the relaxed
// optimum re-scored with its own period.
#pragma once

#include <vector>

#include "dp_table.h"

namespace harp::planner {

struct CapSearchResult {
  bool feasible = false;
  std::vector<Placement> placements;
  Seconds iteration_s = 0, period_s = 0;
  long long caps_total = 0, caps_evaluated = 0, states_visited = 0, front_entries = 0;
  long long dp_runs = 0;  // DP runs, the tight runs of evaluate() and the probes included
  // problem.candidates > 0: every distinct plan that fits met on the way, with its T.
  std::vector<std::pair<Seconds, std::vector<Placement>>> candidates;
};

// `progress` (may be empty) is called after each full DP run with its cap and states.
// `threads`: DpTable's (the DP of one cap on that many cores).
CapSearchResult search_caps(const DpProblem& problem, const ProgressFn& progress, int threads = 1);

}  // namespace harp::planner
