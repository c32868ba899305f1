// Mixed stages' figures (see mixed_stage.h).
#include "harp/cost/mixed_stage.h"

#include <algorithm>
#include <limits>

namespace harp::cost {
namespace {

// The link of a part's own group: one node's when it fits in one, else between nodes.
cluster::Link part_link(const cluster::Subcluster& s, int devices) {
  return devices <= s.devices_per_node ? s.intra_node : s.inter_node;
}

}  // namespace

bool has_mixed(const StageCosts& costs, const MixedGroup& g) {
  const int S = costs.microbatch_size();
  if (g.dp_a < 1 || g.dp_b < 1 || g.dp_a + g.dp_b > S || g.sub_a == g.sub_b) return false;
  for (int n = 1; n <= S; ++n)
    if (!costs.has_samples(g.sub_a, n, g.tp) || !costs.has_samples(g.sub_b, n, g.tp)) return false;
  return true;
}

cluster::Link mixed_allreduce_link(const cluster::Cluster& cluster, const MixedGroup& g) {
  // A part of one replica has no hop of its own in the ring.
  cluster::Link slowest = cluster.path_link(g.sub_a, g.sub_b);
  auto join = [&](const cluster::Link& l) {
    slowest.bandwidth_gbps = std::min(slowest.bandwidth_gbps, l.bandwidth_gbps);
    slowest.latency_s = std::max(slowest.latency_s, l.latency_s);
  };
  if (g.dp_a > 1) join(part_link(cluster.subclusters[g.sub_a], g.dp_a * g.tp));
  if (g.dp_b > 1) join(part_link(cluster.subclusters[g.sub_b], g.dp_b * g.tp));
  return slowest;
}

MixedView mixed_view(const StageCosts& costs, const MixedGroup& g) {
  HARP_CHECK(has_mixed(costs, g)) << "no mixed stage of " << g.dp_a << " + " << g.dp_b << " replicas at tp "
                                  << g.tp;
  MixedView v;
  v.costs_ = &costs;
  v.group_ = g;
  v.samples_ = costs.microbatch_size();
  v.a_.resize(v.samples_ + 1);
  v.b_.resize(v.samples_ + 1);
  for (int n = 1; n <= v.samples_; ++n) {
    v.a_[n] = costs.replica_view(g.sub_a, n, g.tp);
    v.b_[n] = costs.replica_view(g.sub_b, n, g.tp);
  }
  const cluster::Link link = mixed_allreduce_link(costs.cluster(), g);
  const double n = g.dp_a + g.dp_b;
  v.allreduce_ = {link.latency_s,
                  2.0 * (n - 1.0) / n / g.tp / link.bytes_per_s() * costs.config().gradient_bytes_per_param_byte};
  return v;
}

Seconds MixedView::replica_s(bool b, int samples, int first, int last, Recompute recompute) const {
  return (b ? b_ : a_)[samples].compute_s(first, last, recompute);
}

MixedSplit MixedView::split(int first, int last, Recompute recompute) const {
  const int da = group_.dp_a, db = group_.dp_b;
  MixedSplit best;
  best.slowest_s = std::numeric_limits<double>::infinity();
  for (int na = da; na + db <= samples_; ++na) {
    const int sa = (na + da - 1) / da, sb = (samples_ - na + db - 1) / db;
    const Seconds ta = replica_s(false, sa, first, last, recompute);
    const Seconds tb = replica_s(true, sb, first, last, recompute);
    const Seconds t = std::max(ta, tb);
    if (t < best.slowest_s) best = {na, sa, sb, t, ta >= tb};
  }
  return best;
}

std::vector<int> MixedView::shares(const MixedSplit& split) const {
  std::vector<int> out;
  auto even = [&](int samples, int replicas) {
    for (int d = 0; d < replicas; ++d) out.push_back(samples / replicas + (d < samples % replicas ? 1 : 0));
  };
  even(split.samples_a, group_.dp_a);
  even(samples_ - split.samples_a, group_.dp_b);
  return out;
}

StageFigures MixedView::replica(bool b, int samples, int first, int last, Recompute recompute) const {
  const RangeView& v = (b ? b_ : a_)[samples];
  StageFigures f = v.at(first, last, recompute);
  f.allreduce_s = 0;
  const int sub = b ? group_.sub_b : group_.sub_a;
  f.bwd_weight_s = costs_->replica_figures(sub, samples, group_.tp, first, last, recompute).bwd_weight_s;
  f.weight_grad_bytes = activation_memory_bytes(costs_->weight_grad_bytes(first, last), samples, group_.tp);
  return f;
}

Seconds MixedView::allreduce_s(int first, int last) const {
  return allreduce_.at(costs_->param_bytes(first, last));
}

Seconds MixedView::optimizer_s(int first, int last) const {
  return std::max(a_[1].at(first, last).optimizer_s, b_[1].at(first, last).optimizer_s);
}

}  // namespace harp::cost
