// Plan assembly shared by every strategy (see plan_builder.h).
#include "harp/planner/plan_builder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "harp/cost/comm_cost.h"
#include "harp/plan/closed_form.h"

namespace harp::planner {

namespace {

// A placement's parts: (subcluster, first node, last node) of its own devices and, for
// a mixed stage, of its second subcluster's.
struct Part {
  int sub, first_node, last_node;
};
std::vector<Part> parts_of(const cluster::Cluster& cluster, const Placement& p) {
  std::vector<Part> out = {{p.subcluster, p.first_node, p.last_node(cluster.subclusters.at(p.subcluster).devices_per_node)}};
  if (p.mixed())
    out.push_back({p.second_subcluster, 0, (p.second_devices - 1) / cluster.subclusters.at(p.second_subcluster).devices_per_node});
  return out;
}

// A mixed stage's split, the search's, and one replica of each part at its largest
// share (part A's first, then B's).
struct MixedParts {
  cost::MixedSplit split;
  StageFigures part[2];
};

// A mixed stage: its replicas' figures from the same split the search made.
MixedParts fill_mixed(const StageCosts& costs, const Placement& pl, plan::Stage& s) {
  const auto& cluster = costs.cluster();
  const cost::MixedView v = cost::mixed_view(costs, pl.group());
  MixedParts m;
  m.split = v.split(pl.first_layer, pl.last_layer, pl.recompute);
  for (bool in_b : {false, true})
    m.part[in_b] = v.replica(in_b, in_b ? m.split.share_b : m.split.share_a, pl.first_layer, pl.last_layer,
                             pl.recompute);
  s.shares = v.shares(m.split);
  s.dp = pl.dp + pl.second_dp;
  const int base = cluster.first_device_id(pl.second_subcluster);
  for (int d = 0; d < pl.second_devices; ++d) s.devices.push_back(base + d);
  const auto& a = cluster.device_of(pl.subcluster);
  const auto& b = cluster.device_of(pl.second_subcluster);
  for (int d = 0; d < s.dp; ++d) {
    const bool in_b = d >= pl.dp;
    s.replica_devices.push_back((in_b ? b : a).name);
    s.replica_slowdowns.push_back((in_b ? b : a).emulated_slowdown);
    s.replica_compute_s.push_back(v.replica_s(in_b, s.shares[d], pl.first_layer, pl.last_layer, pl.recompute));
  }
  if (std::all_of(s.replica_slowdowns.begin(), s.replica_slowdowns.end(), [](double f) { return f == 1.0; }))
    s.replica_slowdowns.clear();
  // Utilisation is against devices x peak: the mean peak of the stage's devices.
  s.peak_tflops = (pl.dp * a.peak_tflops + pl.second_dp * b.peak_tflops) / s.dp;
  const StageFigures& slowest = m.part[m.split.a_slowest ? 0 : 1];
  s.fwd_s = slowest.fwd_s;
  s.bwd_s = slowest.bwd_s;
  s.bwd_weight_s = slowest.bwd_weight_s;
  s.fixed_fwd_s = slowest.fixed_fwd_s;
  s.fixed_bwd_s = slowest.fixed_bwd_s;
  s.allreduce_s = v.allreduce_s(pl.first_layer, pl.last_layer);
  s.optimizer_s = v.optimizer_s(pl.first_layer, pl.last_layer);
  s.fixed_step_s = std::max(m.part[0].fixed_step_s, m.part[1].fixed_step_s);
  s.weight_grad_bytes = std::max(m.part[0].weight_grad_bytes, m.part[1].weight_grad_bytes);
  s.cost_source = costs.stage_source(pl.subcluster, pl.first_layer, pl.last_layer, 1, pl.tp);
  return m;
}

// A mixed stage's memory: the part with the least room left at its launch count.
void mixed_memory(const StageCosts& costs, const Placement& pl, const MixedParts& m, plan::Stage& s) {
  double least_room = std::numeric_limits<double>::infinity();
  for (bool in_b : {false, true}) {
    const StageFigures& f = m.part[in_b];
    const Bytes usable = costs.usable_memory_bytes(in_b ? pl.second_subcluster : pl.subcluster);
    const double room = usable - f.memory_bytes(s.launch_count);
    if (room < least_room) {
      least_room = room;
      s.memory_static_bytes = f.static_bytes;
      s.memory_working_bytes = f.working_bytes;
      s.activation_bytes = f.activation_bytes;
      s.usable_memory_bytes = usable;
    }
  }
  s.memory_bytes = s.memory_static_bytes + s.launch_count * s.activation_bytes;
}

}  // namespace

Boundary boundary(const cluster::Cluster& cluster, const Placement& a, const Placement& b, Bytes bytes) {
  Boundary out;
  for (const Part& x : parts_of(cluster, a))
    for (const Part& y : parts_of(cluster, b)) {
      const cluster::Link link = x.sub == y.sub ? cluster.link_for(x.sub, x.last_node, y.sub, y.first_node)
                                                : cluster.path_link(x.sub, y.sub);
      const Seconds t = cost::p2p_s(bytes, link);
      if (t > out.comm_s) {  // bytes > 0: the first pair sets it
        out.comm_s = t;
        out.latency_s = link.latency_s;
      }
      out.crosses_nodes = out.crosses_nodes || x.sub != y.sub || x.last_node != y.first_node;
    }
  return out;
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
  std::vector<MixedParts> mixed(S);  // a mixed stage's, kept for its memory below
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
    s.zero = pl.dp > 1 && !pl.mixed() ? pl.zero : 0;
    if (pl.mixed()) {
      mixed[i] = fill_mixed(costs, pl, s);  // its memory once its launch count is known
    } else {
      StageFigures f = costs.stage(pl.subcluster, pl.first_layer, pl.last_layer, pl.dp, pl.tp, pl.recompute, s.zero);
      s.fwd_s = f.fwd_s;
      s.bwd_s = f.bwd_s;
      s.bwd_weight_s = f.bwd_weight_s;
      s.weight_grad_bytes = f.weight_grad_bytes;
      s.usable_memory_bytes = costs.usable_memory_bytes(pl.subcluster);
      s.allreduce_s = f.allreduce_s;
      s.optimizer_s = f.optimizer_s;
      s.fixed_fwd_s = f.fixed_fwd_s;
      s.fixed_bwd_s = f.fixed_bwd_s;
      s.fixed_step_s = f.fixed_step_s;
      s.memory_static_bytes = f.static_bytes;
      s.memory_working_bytes = f.working_bytes;
      s.activation_bytes = f.activation_bytes;
      s.cost_source = costs.stage_source(pl.subcluster, pl.first_layer, pl.last_layer, pl.dp, pl.tp);
    }
    if (i + 1 < S) {
      s.comm_bytes = costs.cut_bytes(pl.last_layer - 1);
      s.cut_shape = costs.layers()[pl.last_layer - 1].output_shape;
      const Boundary link = boundary(cluster, pl, placements[i + 1], s.comm_bytes);
      s.comm_s = link.comm_s;
      s.comm_latency_s = link.latency_s;
      s.crosses_nodes = link.crosses_nodes;
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
    if (placements[i].mixed()) mixed_memory(costs, placements[i], mixed[i], p.stages[i]);
  }
  for (plan::Stage& st : p.stages)
    for (int d : st.devices) st.nodes.push_back(cluster.node_of_device(d));
  return p;
}

void cap_launch_counts_to_memory(const StageCosts& costs, plan::Plan& plan) {
  int previous = plan.microbatches;
  for (auto& s : plan.stages) {
    const Bytes room = usable_bytes(costs, s) - s.memory_static_bytes;
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
    Bytes usable = usable_bytes(costs, s);
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
