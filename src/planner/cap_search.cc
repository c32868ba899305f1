// Branch and bound over the sorted candidate periods (see cap_search.h for why it is exact).
#include "cap_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "harp/plan/closed_form.h"

namespace harp::planner {
namespace {

// The first tight run's bound: 10% above the lower bound, the same slack added again after
// each miss, the bound given up for prune_at after kMaxTightRuns. Added, not doubled: a
// run's states grow steeply with its bound, so overshooting the optimum costs more than
// one more run below it (GPT-76B on the 1024 GPUs of bench/paper/scalability.py: R / lb =
// 1.24; the last run at 1.3 lb keeps 49,597 states, doubling's at 1.4 lb kept 86,828).
constexpr double kFirstSlack = 0.1;
constexpr int kMaxTightRuns = 8;
constexpr int kFloorTightRuns = 3;  // at the floor cap (up to 1.3 lb), before the probes take over

}  // namespace

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
  // A plan to beat (DpProblem::incumbent_s; infinity when none) prunes from the start.
  double best = problem.incumbent_s * (1 + 1e-12);

  BuildOptions build;
  build.microbatches = problem.B;
  build.schedule = problem.harp ? plan::ScheduleKind::kHarp1F1B : plan::ScheduleKind::k1F1B;
  auto keep = [&](std::vector<Placement> pl, double t, double period) {
    if (problem.candidates > 0) result.candidates.emplace_back(t, pl);
    if (t < best) {
      best = t;
      result.feasible = true;
      result.placements = std::move(pl);
      result.iteration_s = t;
      result.period_s = period;
    }
  };
  // Tight runs at caps[i]. A run bounded by g finds every plan below g, and is much
  // cheaper than one at prune_at when g is close to the relaxation's lower bound lb
  // (DpTable::lower_bound): most partial plans are dropped. Bounds go from
  // lb (1 + kFirstSlack) up, a slack more each time, kMaxTightRuns of them at most, then
  // (`finish`) prune_at itself. Returns the first outcome `done` accepts, else the last
  // run's. The outcome stays in `tight`, with its table, while no other run follows, so
  // a later call for the same cap goes on from it.
  double gap = 1;  // R / lb at the last evaluated cap where both were found
  struct Tight {
    int cap = -1;
    double g = 0;
    int tries = 0;
    bool table_valid = false;  // false once another run (a probe) overwrote the table
    DpOutcome out;
  } tight;
  auto run_tight = [&](int i, double prune_at, int max_tries, bool finish, auto done) {
    const double lb = table.lower_bound(caps[i]);
    if (!std::isfinite(lb)) return DpOutcome{};  // not even the relaxation fits this cap
    // The first bound: R / lb as the last evaluated cap had it, plus half the first slack
    // (neighbouring caps have alike gaps); a prune_at within twice that is tight enough.
    const double first = lb * std::max(1 + kFirstSlack, gap * (1 + kFirstSlack / 2));
    double g = lb > 0 && prune_at > lb + 2 * (first - lb) ? first : prune_at;
    // After a miss at `miss`: a slack more, or prune_at itself where the bound after that
    // would pass it (a run just below prune_at costs nearly as much as one at it).
    auto next_bound = [&](double miss) {
      const double step = first > lb ? first - lb : miss - lb;
      return miss + 2 * step < prune_at ? miss + step : prune_at;
    };
    int tries = 0;
    if (tight.cap == i) {  // go on from the last run at this cap
      tries = tight.tries;
      g = std::min(prune_at, tight.g);
      const bool settled = g == tight.g && (done(tight.out, g) || g >= prune_at);
      if (settled && tight.table_valid) return tight.out;
      if (!settled) {  // nothing below tight.g: the next bound (a probe since leaves that true)
        if (tries >= max_tries && !finish) return tight.out;
        g = tries < max_tries ? std::min(prune_at, next_bound(g)) : prune_at;
      }
    }
    for (;;) {
      tight = {i, g, ++tries, true, table.run(caps[i], g)};
      ++result.dp_runs;
      result.states_visited += tight.out.states;
      result.front_entries += tight.out.entries;
      if (done(tight.out, g) || g >= prune_at) return tight.out;
      if (tries >= max_tries && !finish) return tight.out;
      g = tries < max_tries ? std::min(prune_at, next_bound(g)) : prune_at;
    }
  };
  // Runs the DP at caps[i]; records R and updates the best plan from both outcomes.
  // `low` is the smallest cap R(caps[i]) will bound: partial plans that cannot beat the
  // best plan with a period of at least caps[low] are dropped (R stays exact below
  // best - (B - 1) caps[low], which is all the bound test needs). Tight runs stop once
  // the exact optimum (some t or c equal to the cap) is below g: then both outcomes are
  // those of a run at prune_at.
  auto evaluate = [&](int i, int low) {
    const double prune_at = low < 0 ? inf : best - B1 * caps[low];
    const DpOutcome out =
        run_tight(i, prune_at, kMaxTightRuns, true, [](const DpOutcome& o, double g) { return o.exact < g; });
    tight.cap = -1;  // the placements below are read; later runs overwrite the table
    const double lb = table.lower_bound(caps[i]);
    if (lb > 0 && std::isfinite(out.relaxed)) gap = out.relaxed / lb;
    ++result.caps_evaluated;
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
  // Feasibility probes keep one entry per state (DpTable::feasible): much cheaper than
  // a full run. A feasible probe's plan is the first incumbent.
  auto probe = [&](int i) {
    ++result.caps_evaluated;
    ++result.dp_runs;
    tight.table_valid = false;
    const int entry = table.feasible(caps[i]);
    if (entry < 0) return false;
    std::vector<Placement> pl = table.placements(entry);
    plan::Plan p = build_plan(*problem.costs, pl, build);
    if (check_memory(*problem.costs, p).ok()) keep(std::move(pl), p.predicted.iteration_s, p.predicted.period_s);
    return true;
  };
  // The floor cap is often feasible: any plan a tight run finds there proves it, with no
  // probe, and evaluate() goes on from that run.
  // With a plan to beat, only plans below it matter there too (prune_at as evaluate's),
  // and the tight runs go on up to that bound: the probes below look for a first plan,
  // and there is one.
  const double floor_prune = std::isfinite(best) ? best - B1 * caps[lo] : inf;
  const bool floor_feasible = run_tight(lo, floor_prune, kFloorTightRuns, std::isfinite(best),
                                        [](const DpOutcome& o, double g) { return o.relaxed < g; })
                                  .relaxed < inf;
  // A run bounded by the plan to beat that finds nothing (or no relaxed plan at all)
  // shows that no plan with every t and c within caps[lo] beats it: the caps above are
  // searched without probes (they look for a first plan, and there is one).
  const bool floor_beaten = std::isfinite(best) && ((tight.cap == lo && tight.g >= floor_prune) ||
                                                    !std::isfinite(table.lower_bound(caps[lo])));
  if (!floor_feasible && floor_beaten) {
    ++result.caps_evaluated;
    relaxed[lo] = inf;
  } else {
    int step = 1, hi = lo;
    while (!floor_feasible && !probe(hi)) {
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
    r_at(lo, lo);  // the smallest feasible cap: the first plans, exact and relaxed
  }
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
