// Which rank runs what in a plan: the ranks of every stage, replica and tensor-parallel
// position, and the sample slices neighbouring stages exchange. Torch-free, so that the
// runtime and `harp export --to pytorch-pipelining` read one layout.
#pragma once

#include <utility>
#include <vector>

#include "harp/common/status.h"
#include "harp/plan/plan.h"

namespace harp::plan {

// Which rank runs what: the plan's `devices` order when every stage lists its devices
// (rank r runs the r-th smallest device id the plan uses), else stage by stage, stage
// 0's first. A stage's devices (dp x tp of them) are replica-major: replica d's tensor-
// parallel ranks are devices [d tp, (d + 1) tp), adjacent ids inside one node, as
// Megatron orders tp innermost. Replica d of a stage holds samples [d n, (d + 1) n) of
// each microbatch (n = microbatch_size / dp), or its own share when the stage's shares are
// uneven (plan::Stage::shares); its tp ranks hold the same samples and shards of the weights.
struct RankLayout {
  int rank = 0, world_size = 1;
  int stage = 0, dp_rank = 0, tp_rank = 0;
  // Global ranks of every stage, replica-major: stage_ranks[s][d * tp + t].
  std::vector<std::vector<int>> stage_ranks;
  std::vector<int> stage_tp;                  // tp per stage (empty: 1 everywhere)
  std::vector<int> rank_device;               // global device id per rank; -1 unknown
  int microbatch_size = 1;                    // samples per microbatch, split over a stage's replicas
  // Per stage, the first sample of each replica and then microbatch_size (dp + 1 entries);
  // empty: equal shares.
  std::vector<std::vector<int>> stage_firsts;

  int num_stages() const { return static_cast<int>(stage_ranks.size()); }
  int tp_of(int s) const { return stage_tp.empty() ? 1 : stage_tp[s]; }
  int dp_of(int s) const { return static_cast<int>(stage_ranks[s].size()) / tp_of(s); }
  int rank_of(int s, int d, int t) const { return stage_ranks[s][d * tp_of(s) + t]; }
  int dp() const { return dp_of(stage); }
  // The first sample of a microbatch that replica d of stage s holds (d = dp: the end).
  int first_sample(int s, int d) const {
    return stage_firsts.empty() ? d * (microbatch_size / dp_of(s)) : stage_firsts[s][d];
  }
  int samples_of(int s, int d) const { return first_sample(s, d + 1) - first_sample(s, d); }
  int tp() const { return tp_of(stage); }
  // This rank's data-parallel group (the stage's replicas at its tp rank) and its
  // tensor-parallel group (its replica's tp ranks), in group order.
  std::vector<int> dp_group() const;
  std::vector<int> tp_group() const;

  // A slice of a microbatch a rank exchanges with one rank of a neighbouring stage:
  // samples [first, first + count) of its own share.
  struct Exchange {
    int peer, first, count;
  };
  // What the rank at (stage, dp_rank, tp_rank) sends to `other_stage` (sending) or
  // receives from it. Replica d of a stage owns samples [first_sample(d),
  // first_sample(d + 1)) of every microbatch; it exchanges with every replica whose
  // samples overlap. Every tp rank of a replica holds the whole cut tensor: tp rank u of the
  // receiving replica takes it from tp rank u mod (the sender's tp).
  std::vector<Exchange> exchanges(int stage, int dp_rank, int tp_rank, int other_stage, bool sending) const;
  // Every directed pair (sender, receiver) of ranks that exchange cut tensors, forward or
  // backward, sorted: the channels of the schedule's point-to-point messages.
  std::vector<std::pair<int, int>> links() const;
};

// FailedPrecondition when the plan needs a different number of ranks or lists a device
// twice.
StatusOr<RankLayout> layout_for(const Plan& plan, int world_size, int rank);

}  // namespace harp::plan
