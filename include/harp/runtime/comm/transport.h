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
#include "harp/plan/rank_layout.h"
#include "harp/schedule/action.h"

namespace harp::runtime {

// The tag of link probes (Transport::round_trip), apart from every microbatch's.
inline constexpr int kProbeTag = 1 << 30;

// A failure of the distributed run (peer death, timeout): caught at the CLI boundary.
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Which rank runs what (RankLayout, layout_for) is the plan's: harp/plan/rank_layout.h.
using plan::RankLayout;
using plan::layout_for;

// A pending transfer; wait() throws RuntimeFailure with "`what` <peer>: <reason>" on
// failure or timeout (so `what` ends with "from rank" or "to rank").
class Transfer {
 public:
  // What an implementation waits on. wait() throws RuntimeFailure("<reason>").
  struct Op {
    virtual ~Op() = default;
    virtual void wait(std::chrono::milliseconds timeout) = 0;
    // Makes the calling thread's current stream wait for the transfer, where the
    // transport can (NCCL); the host waits (wait) where it cannot.
    virtual void wait_on_stream(std::chrono::milliseconds timeout) { wait(timeout); }
    // Whether the transfer has completed, without waiting (false when unknown); a
    // failure is left to wait() to report.
    virtual bool done() { return false; }
  };

  Transfer() = default;
  Transfer(std::shared_ptr<Op> op, std::string what, int peer);
  // The host waits until the transfer is done.
  void wait(std::chrono::milliseconds timeout);
  // The current stream waits for it (NCCL: the host goes on; a transfer that never
  // completes is found by Transport::finish_step); elsewhere as wait().
  void wait_on_stream(std::chrono::milliseconds timeout);
  bool pending() const { return op_ != nullptr; }
  // Completed (or never pending): its buffer may be released. Does not wait.
  bool done() const { return op_ == nullptr || op_->done(); }

 private:
  void complete(std::chrono::milliseconds timeout, bool on_stream);

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
  // Waits, on the host, for every transfer of this rank's that is device work: what a
  // device-wide synchronisation (cudaDeviceSynchronize) waits for among the
  // communication, NCCL's posted receives and unmatched sends included. Nothing on Gloo
  // (its transfers complete on the host); the in-memory transport's NCCL rules wait for
  // them (mem_transport.h). Throws RuntimeFailure where that cannot end.
  virtual void synchronize_device(const std::string& what) { (void)what; }
  // The end of a step's communication: waits, bounded by the timeout, for the work that
  // streams were made to wait for (wait_on_stream, and NCCL collectives); throws
  // RuntimeFailure naming the first that did not complete (and aborts the NCCL groups, so
  // no kernel spins on). Nothing to do where every wait was the host's.
  virtual void finish_step() {}
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
