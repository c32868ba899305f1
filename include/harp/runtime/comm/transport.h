// The seam between the interpreter and communication: everything the executor and the
// training loop need (isend, irecv, the three all-reduces, barrier, abort), behind one
// interface with two implementations: c10d process groups (comm.h: Gloo on CPU) and an
// in-memory network for thread ranks in tests (mem_transport.h), which can kill, stall,
// delay or drop at a chosen rank, step and action.
//
// Every wait is bounded: a peer that dies or stalls surfaces as a RuntimeFailure whose
// message names the peer rank, the awaited action and the step.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/schedule/action.h"

namespace harp::runtime {

// The tag of link probes (Transport::round_trip), apart from every microbatch's.
inline constexpr int kProbeTag = 1 << 30;

// A failure of the distributed run (peer death, timeout): caught at the CLI boundary.
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
StatusOr<RankLayout> layout_for(const plan::Plan& plan, int world_size, int rank);

// A pending transfer; wait() throws RuntimeFailure with "`what` <peer>: <reason>" on
// failure or timeout (so `what` ends with "from rank" or "to rank").
class Transfer {
 public:
  // What an implementation waits on. wait() throws RuntimeFailure("<reason>").
  struct Op {
    virtual ~Op() = default;
    virtual void wait(std::chrono::milliseconds timeout) = 0;
  };

  Transfer() = default;
  Transfer(std::shared_ptr<Op> op, std::string what, int peer);
  void wait(std::chrono::milliseconds timeout);
  bool pending() const { return op_ != nullptr; }

 private:
  std::shared_ptr<Op> op_;
  std::string what_;
  int peer_ = -1;
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const RankLayout& layout() const { return layout_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Contiguous CPU tensors; the caller keeps them alive until the transfer completes.
  virtual Transfer isend(torch::Tensor& t, int peer, int tag, const std::string& what) = 0;
  virtual Transfer irecv(torch::Tensor& t, int peer, int tag, const std::string& what) = 0;
  // Sum over the stage's data-parallel group (no-op when dp == 1).
  virtual void allreduce_dp(torch::Tensor& t, const std::string& what) = 0;
  // Sharded optimizer state (exec/zero.h), over the stage's data-parallel group: `flat`
  // is dp equal chunks; reduce_scatter_dp leaves in `shard` the sum over the group of
  // chunk dp_rank (`flat` is clobbered), all_gather_dp fills `flat` with every member's
  // `shard` in group order. These defaults are all-reduces (exact: the other chunks add
  // zeros); the c10d transport moves one chunk per member instead (comm.h).
  virtual void reduce_scatter_dp(torch::Tensor& flat, torch::Tensor& shard, const std::string& what);
  virtual void all_gather_dp(torch::Tensor& shard, torch::Tensor& flat, const std::string& what);
  // Sum over this replica's tensor-parallel group (no-op when tp == 1).
  virtual void allreduce_tp(torch::Tensor& t, const std::string& what) = 0;
  // Sum over the tied-embedding group (first and last stage). REQUIRES the group exists.
  virtual void allreduce_tied(torch::Tensor& t, const std::string& what) = 0;
  // Sum over every rank.
  virtual void allreduce_world(torch::Tensor& t, const std::string& what) = 0;
  virtual void barrier(const std::string& what) = 0;
  // A link probe: `bytes` to `peer` and back (the initiator sends first, the peer echoes),
  // over the CPU group whatever the device, as a pair of ranks the plan does not join
  // has no link of its own there. Returns the round trip in seconds on the initiator, 0 on
  // the peer; half of it is the transit of one message, with no clock to agree on.
  virtual double round_trip(int peer, std::int64_t bytes, bool initiator, const std::string& what) = 0;
  // Ends this rank's part: every later call throws RuntimeFailure("aborted: reason"),
  // and peers waiting on this rank fail instead of waiting for the timeout (where the
  // implementation can tell them). Idempotent.
  virtual void abort(const std::string& reason) = 0;
  // Called by the executor before each action of a step. The c10d transport ignores
  // it; the in-memory one injects its faults here.
  virtual void before_action(int step, const schedule::Action& action) {
    (void)step;
    (void)action;
  }

 protected:
  Transport(RankLayout layout, std::chrono::milliseconds timeout)
      : layout_(std::move(layout)), timeout_(timeout) {}

 private:
  RankLayout layout_;
  std::chrono::milliseconds timeout_;
};

// The members of the tied-embedding group: the first stage's ranks, then the last's.
std::vector<int> tied_group_members(const RankLayout& layout);

}  // namespace harp::runtime
