// A mixed stage: one pipeline stage whose data-parallel replicas are of two device
// types, `dp_a` replicas on subcluster A and `dp_b` on subcluster B, all at one tp, each
// taking a share of every microbatch (plan::Stage::shares), as Sailor, FlashFlex and
// Cephalo give each device a batch share by its speed. The figures come from the same
// prefix sums as every other stage's (stage_costs.h).
#pragma once

#include <vector>

#include "harp/cost/stage_costs.h"

namespace harp::cost {

struct MixedGroup {
  int sub_a = 0, dp_a = 1;
  int sub_b = 0, dp_b = 1;
  int tp = 1;
};

// How a microbatch splits over a mixed group: the A replicas take `samples_a` of it
// together and the B replicas the rest, each part as evenly as it can (its first
// replicas one sample more); the stage's time is its slowest replica's.
struct MixedSplit {
  int samples_a = 0;
  int share_a = 0, share_b = 0;  // the largest share of an A and of a B replica
  Seconds slowest_s = 0;
  bool a_slowest = true;         // whether an A replica is the slowest (ties: A)
};

class MixedView;
MixedView mixed_view(const StageCosts& costs, const MixedGroup& g);

class MixedView {
 public:
  // The exact min-max split: within a part every replica runs the same layers on the
  // same device, so an even split is best there, and only samples_a is searched
  // (O(microbatch_size)). Ties keep the fewest samples on A.
  MixedSplit split(int first, int last, Recompute recompute = Recompute::kNone) const;
  // Every replica's samples, the A replicas first (plan::Stage::shares).
  std::vector<int> shares(const MixedSplit& split) const;
  // One replica of part A (b false) or B running `samples`: its figures (fwd_s, bwd_s
  // with the recomputed forward; static_bytes with the recomputation's working set;
  // activation_bytes; optimizer_s; bwd_weight_s and weight_grad_bytes as
  // StageCosts::stage gives them) on layers [first, last). No all-reduce.
  StageFigures replica(bool b, int samples, int first, int last, Recompute recompute) const;
  // Per device of one replica running `samples`: its training state and workspace with
  // the recomputation's working set, and what it keeps per in-flight microbatch (as
  // replica() gives them, without its other work).
  Bytes static_bytes(bool b, int samples, int first, int last, Recompute recompute) const {
    const RangeView& v = (b ? b_ : a_)[samples];
    return v.static_bytes(first, last) + v.working_set_bytes(first, last, recompute);
  }
  Bytes activation_bytes(bool b, int samples, int first, int last, Recompute recompute) const {
    return (b ? b_ : a_)[samples].activation_bytes(first, last, recompute);
  }
  // fwd + bwd of one replica, rounded as StageFigures::compute_s of replica().
  Seconds replica_s(bool b, int samples, int first, int last, Recompute recompute) const;
  // The group's gradient all-reduce (a ring over dp_a + dp_b replicas on the slowest
  // link among them) and the slower part's optimizer step.
  Seconds end_s(int first, int last) const { return allreduce_s(first, last) + optimizer_s(first, last); }
  Seconds allreduce_s(int first, int last) const;
  Seconds optimizer_s(int first, int last) const;
  const MixedGroup& group() const { return group_; }
  int replicas() const { return group_.dp_a + group_.dp_b; }

 private:
  friend MixedView mixed_view(const StageCosts& costs, const MixedGroup& g);
  const StageCosts* costs_ = nullptr;
  MixedGroup group_;
  int samples_ = 1;                     // the microbatch size
  std::vector<RangeView> a_, b_;        // by samples, 1..samples_ (index 0 unused)
  AffineTime allreduce_;
};

// Whether StageCosts has times for every sample count of both parts at `g.tp`, and the
// microbatch has a sample for every replica.
bool has_mixed(const StageCosts& costs, const MixedGroup& g);

// The link the group's all-reduce crosses: the slowest among part A's own (inside a
// node or between nodes; when it has several replicas), part B's and the one between A
// and B (declared, else the path).
cluster::Link mixed_allreduce_link(const cluster::Cluster& cluster, const MixedGroup& g);

// REQUIRES: has_mixed(costs, g).
MixedView mixed_view(const StageCosts& costs, const MixedGroup& g);

}  // namespace harp::cost
