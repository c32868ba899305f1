// The uniform baseline: what a homogeneous framework does by default on any cluster.
#include "harp/planner/uniform.h"

#include <numeric>

namespace harp::planner {

StatusOr<plan::Plan> plan_uniform(const StageCosts& costs, const BuildOptions& options) {
  const auto& cluster = costs.cluster();
  int nodes = 0;
  for (const auto& s : cluster.subclusters) nodes += s.nodes;
  const int L = costs.num_layers();
  if (L < nodes)
    return infeasible("the uniform strategy puts one stage on each of the " + std::to_string(nodes) +
                      " nodes but the model has only " + std::to_string(L) +
                      " layers; raise the model's granularity or use fewer nodes");
  std::vector<Placement> placements;
  int layer = 0, stage = 0;
  for (int sc = 0; sc < static_cast<int>(cluster.subclusters.size()); ++sc) {
    const auto& sub = cluster.subclusters[sc];
    for (int node = 0; node < sub.nodes; ++node, ++stage) {
      Placement pl;
      pl.subcluster = sc;
      pl.first_node = node;
      pl.devices = sub.devices_per_node;
      // Data parallel as far as the microbatch splits evenly, tensor parallel for the rest.
      pl.dp = std::gcd(costs.microbatch_size(), sub.devices_per_node);
      pl.tp = sub.devices_per_node / pl.dp;
      if (pl.tp > costs.max_tp())
        return infeasible("the uniform strategy runs node " + std::to_string(node) + " of subcluster " + sub.name +
                          " as one stage of dp " + std::to_string(pl.dp) + " x tp " + std::to_string(pl.tp) +
                          " (dp as far as the microbatch of " + std::to_string(costs.microbatch_size()) +
                          " splits), but tensor parallelism goes to " + std::to_string(costs.max_tp()) +
                          " here (the model's heads, key/value heads and ffn width, and --max-tp); use a "
                          "microbatch size that more replicas divide");
      if (!costs.has(sc, pl.dp, pl.tp))
        return not_found("the uniform strategy needs times for " + costs.missing_entry(sc, pl.dp, pl.tp) +
                         " (node " + std::to_string(node) + " of subcluster " + sub.name +
                         " as dp " + std::to_string(pl.dp) + " x tp " + std::to_string(pl.tp) + ")");
      const int count = L / nodes + (stage < L % nodes ? 1 : 0);
      pl.first_layer = layer;
      pl.last_layer = layer + count;
      pl.recompute = options.uniform_recompute;
      pl.zero = pl.dp > 1 ? options.uniform_zero : 0;
      layer += count;
      placements.push_back(pl);
    }
  }
  BuildOptions o = options;
  o.schedule = plan::ScheduleKind::k1F1B;
  o.strategy = plan::strategy_name(plan::Strategy::kUniform);
  return build_plan(costs, placements, o);
}

}  // namespace harp::planner
