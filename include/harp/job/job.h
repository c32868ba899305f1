// The job file (DESIGN.md, Files): one YAML document with `cluster:`, `model:`,
// `planner:`, `schedule:`, `cost:` and `training:` sections; `cluster` and `model` may
// instead be paths to their own files (relative to the job file).
#pragma once

#include <string>

#include "harp/cluster/cluster.h"
#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/cost/cost_config.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"
#include "harp/config/train_config.h"

namespace harp::job {

struct PlannerConfig {
  plan::Strategy strategy = plan::Strategy::kHarp;  // harp | uniform | homogeneous
  int microbatches = 8;           // B, microbatches per iteration
  int microbatch_size = 1;        // samples per microbatch (split over a stage's dp)
  // Activation recomputation: none | selective | full | auto (per stage, by the search).
  std::string recompute = "none";
  // Sharded optimizer state (runtime/exec/zero.h): 0, 1 or 2 on every stage with dp > 1,
  // or auto (the search picks per stage, time against memory).
  std::string zero = "0";
  // The search's settings (planner::SearchOptions), each overridable by a `harp plan`
  // flag of the same name.
  int max_tp = 0;                   // largest tp degree; 0: the largest power of two in a node
  bool allow_idle_devices = false;  // the plan may leave devices unused
  bool fixed_order = true;          // false: search the order of the subclusters too
  bool mixed_stages = false;        // also stages of two device types (planner::SearchOptions)
  bool schedule_in_search = true;   // search_schedule: harp-1f1b (true) or 1f1b (the ablation)
};

struct Job {
  std::string file;
  cluster::Cluster cluster;
  model::ModelSpec model;
  cost::CostConfig cost;
  PlannerConfig planner;
  // `schedule.kind`: a schedule kind or auto, what `harp plan --schedule` defaults to
  // (planner.md, "Schedules"); "" when the file gives none (the strategy's own schedule).
  std::string schedule;
  config::TrainConfig training;   // the training section, validated
  Json resolved;                   // the fully resolved job, written into run folders
};

StatusOr<Job> parse_job(const Json& node, const std::string& file);
StatusOr<Job> load_job(const std::string& file);

}  // namespace harp::job
