// The planning recipe, as a library call: from a job (or a cluster and cost tables) to
// the chosen plan. It sweeps the granularity k and the microbatch count B when asked,
// bounds tp by the nodes, loads the profile DB the job names, runs the strategy on
// every candidate, keeps the fastest, and with `compare` runs every strategy on the
// winning candidate. `harp plan`, the benchmarks and the tests all call this.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/cost/cost_table.h"
#include "harp/job/job.h"
#include "harp/planner/strategies.h"

namespace harp::planner {

struct PlanRequest {
  std::optional<Strategy> strategy;  // default: the job's planner.strategy
  // B. Unset: the job's (with its microbatch_size). Set: the job's global batch is kept
  // and split into B microbatches; 0 = auto, every power of two dividing it.
  std::optional<int> microbatches;
  std::optional<int> granularity;    // k; unset: the job's; 0 = auto, 1..4
  // The search's settings (SearchOptions); unset: the job's planner section
  // (job::PlannerConfig), whose defaults are 0 (the largest power of two inside every
  // node), false, true, true.
  std::optional<int> max_tp;
  std::optional<bool> allow_idle_devices;
  std::optional<bool> fixed_order;
  std::optional<bool> mixed_stages;
  std::optional<bool> schedule_in_search;
  // none | selective | full | auto (common/recompute.h); unset: the job's
  // planner.recompute (none for cost tables).
  std::optional<std::string> recompute;
  // ZeRO: 0, 1 or 2 on every stage with dp > 1, or auto (per stage, by the search);
  // unset: the job's planner.zero.
  std::optional<std::string> zero;
  // The schedule (schedule_choice.h): a kind name, or auto (the fastest that fits, by
  // simulation); unset: the strategy's own (harp: harp-1f1b). Applies to the harp strategy.
  std::optional<std::string> schedule;
  bool compare = false;              // also run every strategy on the winning candidate
  std::string profile_file;          // overrides the job's cost.profile
  // A run's OUT/measured_plan.json: the cost source is scaled per device type so that
  // it predicts that run's stage times (cost::calibrate); "" for none.
  std::string calibrate_file;
  ProgressFn progress;               // forwarded to the search
  // Called once per candidate of a sweep (label "k = 2, B = 16 x 2").
  std::function<void(const std::string& label, const StrategyResult& result)> on_candidate;
};

struct PlanOutcome {
  PlanningProblem problem;               // the winning candidate
  StrategyResult result;                 // the requested strategy on it
  std::string label;                     // which sweep candidate won; "" without a sweep
  std::vector<StrategyResult> compared;  // with compare: kAllStrategies order
};

// InvalidArgument for a B that does not divide the global batch, an unreadable profile
// DB, or a model the granularity cannot build. An infeasible problem is an outcome
// whose result.feasible is false.
StatusOr<PlanOutcome> plan_job(const job::Job& job, const PlanRequest& request);

// One candidate per cost table (each table fixes its microbatch size): B is
// `microbatches` when > 0, else global_batch / the table's microbatch size (tables that
// do not divide it are skipped). REQUIRES: tables non-empty; microbatches > 0 or
// global_batch > 0. `files` names the tables in messages (same order).
StatusOr<PlanOutcome> plan_tables(const cluster::Cluster& cluster,
                                  const std::vector<cost::CostTable>& tables,
                                  const std::vector<std::string>& files, int microbatches,
                                  int global_batch, const PlanRequest& request);

// The largest power-of-two tp inside every node of `cluster`, capped at max_tp (> 0).
int max_tp_for(const cluster::Cluster& cluster, int max_tp);

}  // namespace harp::planner
