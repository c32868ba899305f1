// Shared by the planner tests: small-cluster builders, plan rebuilding and descriptions
// for failure messages (tests/planner/).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "harp/cluster/cluster_io.h"
#include "harp/common/document.h"
#include "harp/planner/harp_search.h"
#include "harp/planner/plan_builder.h"
#include "harp/cost/stage_costs.h"
#include "reference/brute_force_planner.h"


namespace harp::planner::testutil {

using reference::BruteForceResult;
using reference::brute_force_search;
using Times = std::map<std::string, std::map<int, StageCosts::LayerTimes>>;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

inline cluster::Cluster cluster_from_yaml(const std::string& yaml) {
  StatusOr<Json> json = parse_yaml_text(yaml, "<inline>");
  HARP_CHECK(json.ok()) << json.status().to_string();
  StatusOr<cluster::Cluster> c = cluster::parse_cluster(*json, "<inline>");
  HARP_CHECK(c.ok()) << c.status().to_string() << "\n" << yaml;
  return *c;
}

inline bool near_rel(double a, double b, double rel = 1e-9) {
  return std::abs(a - b) <= rel * std::max({1.0, std::abs(a), std::abs(b)});
}

// Per-layer times split 1:2 between forward and backward, every layer alike.
inline StageCosts::LayerTimes uniform_times(int layers, double per_layer_s) {
  StageCosts::LayerTimes t;
  t.fwd_s.assign(layers, per_layer_s / 3);
  t.bwd_s.assign(layers, per_layer_s * 2 / 3);
  return t;
}

inline plan::ScheduleKind schedule_of(const SearchOptions& o) {
  return o.schedule;
}

inline plan::Plan rebuild(const StageCosts& costs, const std::vector<Placement>& placements,
                   const SearchOptions& o) {
  BuildOptions b;
  b.microbatches = o.microbatches;
  b.schedule = schedule_of(o);
  return build_plan(costs, placements, b);
}

inline std::string describe_plan(const StageCosts& costs, const std::vector<Placement>& placements,
                          const SearchOptions& o) {
  if (placements.empty()) return "  (no plan)\n";
  const plan::Plan p = rebuild(costs, placements, o);
  std::ostringstream s;
  s.precision(12);
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& pl = placements[i];
    const plan::Stage& st = p.stages[i];
    s << "  stage " << i << ": layers [" << pl.first_layer << ", " << pl.last_layer << ") sub "
      << pl.subcluster << " node " << pl.first_node << " local " << pl.first_local << " devices "
      << pl.devices << " dp " << pl.dp << " tp " << pl.tp;
    if (pl.mixed()) s << " + sub " << pl.second_subcluster << " devices " << pl.second_devices << " dp " << pl.second_dp;
    s << " recompute " << recompute_name(pl.recompute) << " | t " << st.compute_s() << " c "
      << st.comm_s << " ar+opt " << st.allreduce_s + st.optimizer_s << " N " << st.launch_count
      << " mem " << st.memory_bytes / kGiB << " GiB\n";
  }
  s << "  T " << p.predicted.iteration_s << " P " << p.predicted.period_s << " memory "
    << check_memory(costs, p).to_string() << "\n";
  return s.str();
}


}  // namespace harp::planner::testutil
