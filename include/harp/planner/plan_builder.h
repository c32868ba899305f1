// Turns placement decisions into a complete, self-contained Plan: per-stage times,
// boundary transfers, all-reduce and optimizer terms, launch counts, memory and the
// closed-form prediction. Every strategy (uniform, harp, homogeneous) and the
// brute-force reference build their plans here, so their figures are comparable.
#pragma once

#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/cost/mixed_stage.h"
#include "harp/cost/stage_costs.h"

namespace harp::planner {

// The planner reads every figure from the one cost path (cost/stage_costs.h).
using cost::CostTable;
using cost::RangeView;
using cost::StageCosts;
using cost::StageFigures;

// Where a stage runs: `devices` consecutive devices of subcluster `subcluster` starting
// at node `first_node`, local device `first_local` (a group inside one node, or whole
// nodes), arranged as dp x tp.
struct Placement {
  int subcluster = 0;
  int first_node = 0;
  int first_local = 0;
  int devices = 1;
  int dp = 1, tp = 1;
  int first_layer = 0, last_layer = 0;  // [first, last)
  Recompute recompute = Recompute::kNone;
  int zero = 0;  // ZeRO level (runtime/exec/zero.h); 0 when dp is 1
  // A mixed stage (cost/mixed_stage.h): after these dp replicas, `second_dp` more at the
  // same tp on the first `second_devices` devices of subcluster `second_subcluster`, the
  // next in the pipeline's order; -1: a stage of one device type.
  int second_subcluster = -1;
  int second_devices = 0, second_dp = 0;

  bool mixed() const { return second_subcluster >= 0; }
  cost::MixedGroup group() const { return {subcluster, dp, second_subcluster, second_dp, tp}; }
  int last_node(int devices_per_node) const {
    return first_node + (first_local + devices - 1) / devices_per_node;
  }
  bool operator==(const Placement& o) const {
    return subcluster == o.subcluster && first_node == o.first_node && first_local == o.first_local &&
           devices == o.devices && dp == o.dp && tp == o.tp && first_layer == o.first_layer &&
           last_layer == o.last_layer && recompute == o.recompute && zero == o.zero &&
           second_subcluster == o.second_subcluster && second_devices == o.second_devices &&
           second_dp == o.second_dp;
  }
};

struct BuildOptions {
  int microbatches = 1;
  plan::ScheduleKind schedule = plan::ScheduleKind::k1F1B;
  std::string strategy;
  std::string model_name, model_fingerprint;
  // The uniform baseline only: every stage's recomputation (the search sets its own).
  Recompute uniform_recompute = Recompute::kNone;
  int uniform_zero = 0;  // the uniform baseline's ZeRO level on its stages with dp > 1
};

// The transfer of `bytes` from placement `a` to the next placement `b`: over the slowest
// of the links between their parts (a mixed stage has two: every part of `a` sends to
// every part of `b` that holds its samples, and the microbatch waits for the last), the
// latency of that link, and whether any of them leaves a node.
struct Boundary {
  Seconds comm_s = 0, latency_s = 0;
  bool crosses_nodes = false;
};
Boundary boundary(const cluster::Cluster& cluster, const Placement& a, const Placement& b, Bytes bytes);

// Builds the plan. Launch counts follow the schedule kind (δ rule with the plan's own
// period for harp-1f1b). Memory is computed but not enforced: check_memory reports it.
// REQUIRES: costs.has(p.subcluster, p.dp, p.tp) for every placement.
plan::Plan build_plan(const StageCosts& costs, const std::vector<Placement>& placements,
                      const BuildOptions& options);

// Lowers launch counts that exceed a stage's memory to the most that fit, keeping them
// non-increasing along the pipeline, and updates memory_bytes. For a plan searched
// without HARP's counts and given them afterwards (SearchOptions::schedule_in_search).
// check_memory reports a stage that cannot hold even one.
void cap_launch_counts_to_memory(const StageCosts& costs, plan::Plan& plan);

// What one device of the stage may hold: the stage's own figure where the plan gives one
// (a mixed stage's is its binding replica's), else its subcluster's usable memory.
inline Bytes usable_bytes(const StageCosts& costs, const plan::Stage& s) {
  return s.usable_memory_bytes > 0 ? s.usable_memory_bytes : costs.usable_memory_bytes(s.subcluster);
}

// Infeasible naming the first stage whose device memory is exceeded (needed vs usable,
// and what would help); ok if every stage fits.
Status check_memory(const StageCosts& costs, const plan::Plan& plan);

}  // namespace harp::planner
