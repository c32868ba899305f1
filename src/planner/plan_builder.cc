// Plan assembly shared by every strategy (see plan_builder.h).
#include "harp/planner/plan_builder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "harp/cost/comm_cost.h"
#include "harp/plan/closed_form.h"

namespace harp::planner {

cluster::Link boundary_link(const cluster::Cluster& cluster, const Placement& a, const Placement& b) {
  const auto& sub = cluster.subclusters.at(a.subcluster);
  return cluster.link_for(a.subcluster, a.last_node(sub.devices_per_node), b.subcluster, b.first_node);
}

plan::Plan build_plan(const StageCosts& costs, const std::vector<Placement>& placements,
                      const BuildOptions& options) {
  const auto& cluster = costs.cluster();
  plan::Plan p;
  p.model_name = options.model_name;
  p.cluster_fingerprint = cluster.fingerprint();
  p.model_fingerprint = options.model_fingerprint;
  p.microbatches = options.microbatches;
  p.microbatch_size = costs.microbatch_size();
  p.schedule = options.schedule;
  p.strategy = options.strategy;
  p.cost_source = costs.source_description();
  const int S = static_cast<int>(placements.size());
  for (int i = 0; i < S; ++i) {
    const Placement& pl = placements[i];
    const auto& sub = cluster.subclusters.at(pl.subcluster);
    plan::Stage s;
    s.first_layer = pl.first_layer;
    s.last_layer = pl.last_layer;
    s.subcluster = pl.subcluster;
    s.subcluster_name = sub.name;
    s.dp = pl.dp;
    s.tp = pl.tp;
    s.emulated_slowdown = cluster.device_of(pl.subcluster).emulated_slowdown;
    s.device = cluster.device_of(pl.subcluster).name;
    s.peak_tflops = cluster.device_of(pl.subcluster).peak_tflops;
    const int base = cluster.first_device_id(pl.subcluster) + pl.first_node * sub.devices_per_node +
                     pl.first_local;
    for (int d = 0; d < pl.devices; ++d) s.devices.push_back(base + d);
    s.recompute = pl.recompute;
    s.zero = pl.dp > 1 ? pl.zero : 0;
    StageFigures f = costs.stage(pl.subcluster, pl.first_layer, pl.last_layer, pl.dp, pl.tp, pl.recompute, s.zero);
    s.fwd_s = f.fwd_s;
    s.bwd_s = f.bwd_s;
    s.bwd_weight_s = f.bwd_weight_s;
    s.weight_grad_bytes = f.weight_grad_bytes;
    s.usable_memory_bytes = costs.usable_memory_bytes(pl.subcluster);
    s.allreduce_s = f.allreduce_s;
    s.optimizer_s = f.optimizer_s;
    s.memory_static_bytes = f.static_bytes;
    s.activation_bytes = f.activation_bytes;
    s.cost_source = costs.stage_source(pl.subcluster, pl.first_layer, pl.last_layer, pl.dp, pl.tp);
    if (i + 1 < S) {
      const Placement& next = placements[i + 1];
      cluster::Link link = boundary_link(cluster, pl, next);
      s.comm_bytes = costs.cut_bytes(pl.last_layer - 1);
      s.cut_shape = costs.layers()[pl.last_layer - 1].output_shape;
      s.comm_s = cost::p2p_s(s.comm_bytes, link);
      s.comm_latency_s = s.comm_bytes > 0 ? link.latency_s : 0;
      s.crosses_nodes = next.subcluster != pl.subcluster ||
                        next.first_node != pl.last_node(sub.devices_per_node);
    } else {
      s.crosses_nodes = false;
    }
    p.stages.push_back(s);
  }
  // The tied embedding's gradient sync (runtime: one all-reduce over every replica of the
  // first and the last stage) ends the iteration of both stages. The search does not see
  // it: for a given first and last subcluster it is the same for every cut.
  if (S >= 2 && costs.tied_param_bytes() > 0) {
    const plan::Stage& first = p.stages.front();
    const plan::Stage& last = p.stages.back();
    // Inside one subcluster: its node link when both ends are on one node, else its
    // inter-node link (link_for); across subclusters, the path between them.
    const Placement& head = placements.front();
    const Placement& tail = placements.back();
    const int tail_node = tail.last_node(cluster.subclusters.at(tail.subcluster).devices_per_node);
    const cluster::Link link = first.subcluster == last.subcluster
                                   ? cluster.link_for(head.subcluster, head.first_node, tail.subcluster, tail_node)
                                   : cluster.path_link(first.subcluster, last.subcluster);
    const Seconds tied_s = cost::ring_allreduce_s(
        costs.tied_param_bytes() * costs.config().gradient_bytes_per_param_byte, first.dp + last.dp, link);
    p.stages.front().allreduce_s += tied_s;
    p.stages.back().allreduce_s += tied_s;
  }
  p.predicted = plan::closed_form(p);
  std::vector<int> n =
      options.schedule == plan::ScheduleKind::kHarp1F1B
          ? plan::delta_rule_launch_counts(p, p.predicted.period_s)
          : plan::standard_launch_counts(S, options.microbatches, options.schedule);
  for (int i = 0; i < S; ++i) {
    p.stages[i].launch_count = n[i];
    p.stages[i].memory_bytes =
        p.stages[i].memory_static_bytes + n[i] * p.stages[i].activation_bytes;
  }
  return p;
}

void cap_launch_counts_to_memory(const StageCosts& costs, plan::Plan& plan) {
  int previous = plan.microbatches;
  for (auto& s : plan.stages) {
    const Bytes room = costs.usable_memory_bytes(s.subcluster) - s.memory_static_bytes;
    const double fit = s.activation_bytes > 0 ? std::max(1.0, std::floor(room / s.activation_bytes))
                                              : static_cast<double>(s.launch_count);
    const int fits = static_cast<int>(std::min(fit, static_cast<double>(s.launch_count)));
    const int n = std::max(1, std::min(fits, previous));
    s.launch_count = previous = n;
    s.memory_bytes = s.memory_static_bytes + n * s.activation_bytes;
  }
}

Status check_memory(const StageCosts& costs, const plan::Plan& plan) {
  for (int i = 0; i < plan.num_stages(); ++i) {
    const auto& s = plan.stages[i];
    const auto& device = costs.cluster().device_of(s.subcluster);
    Bytes usable = costs.usable_memory_bytes(s.subcluster);
    if (s.memory_bytes <= usable) continue;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "stage %d (layers [%d, %d) on %s) needs %.1f GiB per device (%.1f GiB state + "
                  "%d in-flight x %.2f GiB activations) but %s has %.1f GiB usable; use more "
                  "devices or stages, a smaller microbatch_size, a finer granularity, or "
                  "activation recomputation (--recompute auto)",
                  i, s.first_layer, s.last_layer, s.subcluster_name.c_str(),
                  bytes_to_gib(s.memory_bytes), bytes_to_gib(s.memory_static_bytes), s.launch_count,
                  bytes_to_gib(s.activation_bytes), device.name.c_str(), bytes_to_gib(usable));
    return infeasible(buf);
  }
  return Status();
}

}  // namespace harp::planner
