// The exact HARP search (docs/planner.md). For a cap X on the period, a DP from the tail
// of the model keeps, per state (first layer, subcluster position, devices used there,
// whether some stage or link attains X), the Pareto front of (Σ(t + 2c), launch count of
// the head stage, max(ar + opt)). Keeping the whole front, not one greedy value per cell
// as the authors' code does, is what makes the memory check and the end term exact.
// Caps are searched by branch and bound over the sorted candidate periods.
#include "harp/planner/harp_search.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "harp/cost/comm_cost.h"
#include "cap_search.h"
#include "dp_table.h"

namespace harp::planner {

bool parse_zero_policy(const std::string& policy, std::vector<int>* levels) {
  if (policy == "auto") *levels = {0, 1};
  else if (policy == "0" || policy == "1" || policy == "2") *levels = {policy[0] - '0'};
  else return false;
  return true;
}
namespace {

// Every subcluster order the search may use.
std::vector<std::vector<int>> subcluster_orders(const cluster::Cluster& cluster, bool fixed_order) {
  const int C = static_cast<int>(cluster.subclusters.size());
  std::vector<int> order(C);
  for (int i = 0; i < C; ++i) order[i] = i;
  if (fixed_order) return {order};
  std::vector<std::vector<int>> out;
  do {
    out.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return out;
}

std::string gib(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes_to_gib(b));
  return buf;
}

// Explains an infeasible problem: memory of the hungriest layer, or device counts.
std::string explain_infeasible(const StageCosts& costs, const SearchOptions& options) {
  const auto& cluster = costs.cluster();
  const int L = costs.num_layers();
  // For each layer, the mesh where it alone (one microbatch in flight) comes closest to
  // fitting; report the layer that misses by the most.
  int worst_layer = -1;
  Bytes worst_need = 0, worst_usable = 0;
  for (int i = 0; i < L; ++i) {
    Bytes need = 0, usable = 0;
    double best_excess = std::numeric_limits<double>::infinity();
    for (int sub = 0; sub < static_cast<int>(cluster.subclusters.size()); ++sub) {
      const int dpn = cluster.subclusters[sub].devices_per_node;
      for (int tp = 1; tp <= dpn && (options.max_tp == 0 || tp <= options.max_tp); tp *= 2)
        for (int dp = 1; dp <= costs.microbatch_size(); ++dp) {
          if (!costs.has(sub, dp, tp)) continue;
          Bytes n = std::numeric_limits<double>::infinity();
          for (Recompute r : options.recompute)
            for (int zero : zero_levels(options, dp))
              n = std::min(n, costs.stage(sub, i, i + 1, dp, tp, r, zero).memory_bytes(1));
          const Bytes u = costs.usable_memory_bytes(sub);
          if (n - u < best_excess) {
            best_excess = n - u;
            need = n;
            usable = u;
          }
        }
    }
    if (best_excess > 0 && std::isfinite(best_excess) && (worst_layer < 0 || best_excess > worst_need - worst_usable)) {
      worst_layer = i;
      worst_need = need;
      worst_usable = usable;
    }
  }
  if (worst_layer >= 0)
    return "layer " + std::to_string(worst_layer) + " alone needs at least " + gib(worst_need) +
           " per device on every mesh it can use, but at most " + gib(worst_usable) +
           " is usable there (short by " + gib(worst_need - worst_usable) +
           "); use a finer granularity, a smaller microbatch_size or more tensor parallelism";
  if (!options.allow_idle_devices && cluster.num_devices() > L)
    return "every one of the " + std::to_string(cluster.num_devices()) +
           " devices must be used, but the model has only " + std::to_string(L) +
           " layers and meshes this shape cannot cover them; allow idle devices or use a finer "
           "granularity";
  return "no placement fits every stage's memory with the launch counts its schedule needs "
         "(the devices must all be used: " +
         std::string(options.allow_idle_devices ? "no" : "yes") +
         "); allow idle devices, use more devices, a smaller microbatch_size or fewer microbatches";
}

// An infeasibility the cluster's shape shows before any search: when every device must be
// used, each stage holds at most microbatch_size x (largest tp) devices of one subcluster
// and at least one layer, so the stages needed can outnumber the layers. "" when not.
std::string too_few_layers(const StageCosts& costs, const SearchOptions& options) {
  if (options.allow_idle_devices) return "";
  std::int64_t stages = 0, devices = 0, widest = 1;
  for (const auto& sub : costs.cluster().subclusters) {
    int tp = 1;
    while (tp * 2 <= sub.devices_per_node && (options.max_tp == 0 || tp * 2 <= options.max_tp)) tp *= 2;
    const std::int64_t per_stage = static_cast<std::int64_t>(costs.microbatch_size()) * tp;
    stages += (static_cast<std::int64_t>(sub.nodes) * sub.devices_per_node + per_stage - 1) / per_stage;
    devices += static_cast<std::int64_t>(sub.nodes) * sub.devices_per_node;
    widest = std::max(widest, per_stage);
  }
  // A mixed stage holds devices of two subclusters: only the whole count bounds them.
  if (options.mixed_stages) stages = (devices + widest - 1) / widest;
  if (stages <= costs.num_layers()) return "";
  return "every one of the " + std::to_string(costs.cluster().num_devices()) +
         " devices must be used, which takes at least " + std::to_string(stages) +
         " stages (a stage holds at most microbatch_size x tp devices of one subcluster), but the model has only " +
         std::to_string(costs.num_layers()) + " layers; allow idle devices, use a finer granularity or a larger "
         "microbatch_size";
}

// The plans the orders' searches met, the answer first, then by closed-form T (ties: the
// earlier search, the earlier met), each once, `limit` at most. found[first_standard..]
// searched under standard 1F1B's counts: their plans get HARP's counts cut to the memory.
std::vector<plan::Plan> distinct_candidates(const StageCosts& costs, const std::vector<CapSearchResult>& found,
                                            size_t first_standard, const SearchResult& answer,
                                            const BuildOptions& build, int limit) {
  struct Met {
    Seconds t;
    const std::vector<Placement>* placements;
    bool standard;
  };
  std::vector<Met> met;
  for (size_t i = 0; i < found.size(); ++i)
    for (const auto& [t, pl] : found[i].candidates) met.push_back({t, &pl, i >= first_standard});
  std::stable_sort(met.begin(), met.end(), [](const Met& a, const Met& b) { return a.t < b.t; });
  std::vector<plan::Plan> out = {answer.plan};
  std::vector<const std::vector<Placement>*> seen = {&answer.placements};
  for (const Met& m : met) {
    if (static_cast<int>(out.size()) >= limit) break;
    if (std::any_of(seen.begin(), seen.end(), [&](const auto* s) { return *s == *m.placements; })) continue;
    seen.push_back(m.placements);
    plan::Plan p = build_plan(costs, *m.placements, build);
    if (m.standard) cap_launch_counts_to_memory(costs, p);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

Status check_order_search(const cluster::Cluster& cluster, bool fixed_order) {
  const int C = static_cast<int>(cluster.subclusters.size());
  if (fixed_order || C <= kMaxOrderedSubclusters) return Status();
  return invalid_argument("searching the subcluster order tries every one of " + std::to_string(C) +
                          "! orders; that is done for at most " + std::to_string(kMaxOrderedSubclusters) +
                          " subclusters: keep the file's order (planner.fixed_order: true, --fixed-order true), or "
                          "merge subclusters");
}

StatusOr<SearchResult> search_pipeline(const StageCosts& costs, const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.microbatches < 1)
    return invalid_argument("microbatches must be at least 1; got " + std::to_string(options.microbatches));
  if (options.zero.empty()) return invalid_argument("SearchOptions.zero lists no level; give at least 0");
  for (size_t i = 0; i < options.zero.size(); ++i) {
    if (options.zero[i] < 0 || options.zero[i] > 2)
      return invalid_argument("ZeRO level " + std::to_string(options.zero[i]) + " is not 0, 1 or 2");
    for (size_t j = 0; j < i; ++j)
      if (options.zero[i] == options.zero[j])
        return invalid_argument("ZeRO level " + std::to_string(options.zero[i]) + " is listed twice");
  }
  if (options.recompute.empty()) return invalid_argument("SearchOptions.recompute lists no mode; give at least none");
  for (size_t i = 0; i < options.recompute.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (options.recompute[i] == options.recompute[j])
        return invalid_argument(std::string("recomputation mode ") + recompute_name(options.recompute[i]) +
                                " is listed twice");
  SearchResult result;
  if (std::string why = too_few_layers(costs, options); !why.empty()) {
    result.infeasible_reason = why;
    result.stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }
  HARP_RETURN_IF_ERROR(check_order_search(costs.cluster(), options.fixed_order));
  // Subcluster orders are independent problems: search them on all cores.
  // Mixed stages: the search without them first. Its T bounds which mixed stages can be
  // part of a faster plan (DpProblem::incumbent_s), and the faster plan of the two is kept.
  std::optional<SearchResult> plain;
  if (options.mixed_stages) {
    SearchOptions o = options;
    o.mixed_stages = false;
    HARP_ASSIGN_OR_RETURN(SearchResult r, search_pipeline(costs, o));
    plain = std::move(r);
  }
  // After it, only plans holding a mixed stage are searched; false: none can beat it there.
  auto worth_searching = [&](DpProblem& problem) {
    if (!plain) return true;
    problem.require_mixed = true;
    return !plain->feasible || prune_mixed_stages(problem, plain->iteration_s);
  };
  std::vector<DpProblem> problems;
  for (const auto& order : subcluster_orders(costs.cluster(), options.fixed_order)) {
    DpProblem problem = make_dp_problem(costs, order, options);
    if (worth_searching(problem) && problem.valid) problems.push_back(std::move(problem));
  }
  // Candidates of a harp search also come from the same search under standard 1F1B's
  // counts: plans that fit only with fewer microbatches in flight (then run by 1f1b or
  // zb-h1, or by HARP's counts cut to the memory). Those problems follow the harp ones.
  const size_t harp_problems = problems.size();
  if (options.candidates > 0 && options.schedule == plan::ScheduleKind::kHarp1F1B) {
    SearchOptions standard = options;
    standard.schedule = plan::ScheduleKind::k1F1B;
    for (size_t i = 0; i < harp_problems; ++i) {
      DpProblem problem = make_dp_problem(costs, problems[i].order, standard);
      if (worth_searching(problem)) problems.push_back(std::move(problem));
    }
  }
  std::vector<CapSearchResult> found(problems.size());
  const int cores =
      options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = std::max(1, std::min<int>(static_cast<int>(problems.size()), cores));
  // One order: its DP uses every core instead (the layers' states side by side).
  const int dp_threads = problems.size() == 1 ? cores : 1;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < problems.size(); i = next++)
      found[i] = search_caps(problems[i], threads == 1 ? options.progress : ProgressFn(), dp_threads);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  Seconds best_t = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < harp_problems; ++i) {
    const CapSearchResult& r = found[i];
    ++result.stats.orders_tried;
    result.stats.caps_total += r.caps_total;
    result.stats.caps_evaluated += r.caps_evaluated;
    result.stats.dp_runs += r.dp_runs;
    result.stats.states_visited += r.states_visited;
    result.stats.front_entries += r.front_entries;
    // Ties keep the earliest order, so the answer does not depend on thread timing.
    if (r.feasible && r.iteration_s < best_t) {
      best_t = r.iteration_s;
      result.feasible = true;
      result.placements = r.placements;
      result.iteration_s = r.iteration_s;
      result.period_s = r.period_s;
    }
  }
  if (result.feasible) {
    BuildOptions b;
    b.microbatches = options.microbatches;
    b.schedule = options.schedule;
    result.plan = build_plan(costs, result.placements, b);
    for (const auto& s : result.plan.stages) result.launch_counts.push_back(s.launch_count);
    if (options.candidates > 0)
      result.candidates = distinct_candidates(costs, found, harp_problems, result, b, options.candidates);
  } else {
    result.infeasible_reason = explain_infeasible(costs, options);
  }
  // The plan without mixed stages wins ties, and wins where the tied embedding's sync,
  // added after the search (plan_builder.h), costs a mixed first stage more (its ring has
  // more replicas): allowing mixed stages never gives a slower plan.
  if (plain && plain->feasible &&
      (!result.feasible || plain->plan.predicted.iteration_s <= result.plan.predicted.iteration_s)) {
    plain->stats.caps_evaluated += result.stats.caps_evaluated;
    plain->stats.dp_runs += result.stats.dp_runs;
    plain->stats.states_visited += result.stats.states_visited;
    result = std::move(*plain);
  } else if (plain && plain->feasible && options.candidates > 0) {
    // The candidates: the answer, then the plans both searches met (the second met
    // only plans with a mixed stage), by closed-form T.
    auto& c = result.candidates;
    c.insert(c.end(), std::make_move_iterator(plain->candidates.begin()), std::make_move_iterator(plain->candidates.end()));
    std::stable_sort(c.begin() + 1, c.end(), [](const plan::Plan& a, const plan::Plan& b) {
      return a.predicted.iteration_s < b.predicted.iteration_s;
    });
    if (static_cast<int>(c.size()) > options.candidates) c.resize(options.candidates);
  }
  result.stats.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace harp::planner
