// Planning problems and the three strategies on them, in one cost model so that their
// figures compare fairly: `harp` (the exact search with HARP's 1F1B), `homogeneous`
// (Alpa-style: the same search believing every device is the slowest type, standard
// 1F1B, then scored with the true costs) and `uniform` (uniform.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/cost/cost_config.h"
#include "harp/profile/profile_db.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"
#include "harp/planner/schedule_choice.h"
#include "harp/cost/cost_table.h"
#include "harp/planner/harp_search.h"
#include "harp/cost/stage_costs.h"

namespace harp::planner {

struct PlanningProblem {
  StageCosts costs;        // the true costs
  StageCosts homogeneous;  // every subcluster as the slowest device type (and least memory)
  std::string slowest_device;
  int microbatches = 1;
  Seconds lower_bound_s = 0;     // no plan can be faster
  std::string lower_bound_rule;  // how lower_bound_s was computed
  std::string model_name, model_fingerprint;
  int granularity = 0;  // of the model; 0 for cost tables
  Json model_config;    // model::model_to_json of the model; null for cost tables
};

// From a model and the cost model (analytic, plus a profile DB if given).
// Lower bound: total FLOPs / (Σ device peak × compute efficiency).
// With `calibration`, the source's times are scaled per device type by it.
PlanningProblem problem_from_model(const cluster::Cluster& cluster, const model::ModelSpec& model,
                                   const cost::CostConfig& config, const profile::ProfileDb* db,
                                   int microbatches, int microbatch_size, int max_tp,
                                   const cost::Calibration* calibration = nullptr);

// The layer cost source problem_from_model plans with: the profile DB with the roofline
// for what it lacks, or the roofline. REQUIRES: model and db outlive it.
std::unique_ptr<cost::LayerCostSource> layer_source(const model::ModelSpec& model, const cost::CostConfig& config,
                                                    const profile::ProfileDb* db);

// From an explicit cost table (checked against the cluster first).
// Lower bound: perfect balance of every device's best per-sample time.
StatusOr<PlanningProblem> problem_from_table(const cluster::Cluster& cluster, const CostTable& table,
                                             int microbatches, const std::string& table_file);

using plan::Strategy;

struct StrategyResult {
  Strategy strategy = Strategy::kHarp;
  bool feasible = false;
  plan::Plan plan;      // when feasible
  SearchStats stats;    // for the searching strategies
  std::string reason;   // when infeasible: what is short and what would help
  // With a schedule choice (plan_job.h, PlanRequest::schedule): the simulated iteration
  // under the chosen schedule, by which sweep candidates are then compared (0: by the
  // closed form), and every schedule weighed (schedule_choice.h).
  Seconds judged_s = 0;
  std::vector<ScheduleOption> schedules;
  // SearchOptions::candidates > 0 (harp strategy): the other plans the search met, by
  // closed-form T, each fitting its devices; the schedule choice weighs them too.
  std::vector<plan::Plan> candidates;
  int plans_weighed = 0;  // by the schedule choice: the answer and the candidates
};

// Runs one strategy. `options.schedule` is set from the strategy (harp: HARP's 1F1B;
// the baselines: standard 1F1B); the other options apply to the searching strategies.
StrategyResult run_strategy(const PlanningProblem& problem, Strategy strategy,
                            const SearchOptions& options);

}  // namespace harp::planner
