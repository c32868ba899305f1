// The c10d transport (transport.h): process groups for one rank of a plan.
//
// On the CPU every group is Gloo's: the world group carries the point-to-point transfers
// between neighbouring stages and the end-of-step reduction; one group per data-parallel
// group of a stage, one per tensor-parallel group, one for the tied embedding (the ranks
// of the first and the last stage).
//
// On CUDA the tensors go over NCCL: the data-parallel, tensor-parallel and tied groups
// are NCCL's, and each directed pair of ranks that exchange cut tensors
// (RankLayout::links) gets a two-rank NCCL group of its own. That is the channel the
// schedule's validator reasons about (per sender, receiver and direction, FIFO, no tags):
// a receive posted early on one link cannot hold up a send on another, as it can on one
// shared communicator (docs/runtime.md, "GPUs"). The link groups are created and used
// once at start, in one global order, so that NCCL's lazy, blocking set-up of a
// communicator cannot deadlock two ranks waiting on different pairs; the dp, tp and tied
// communicators are made at once too. The world group stays Gloo's, on the CPU, for the
// metrics reduction and barriers.
//
// On NCCL nothing in a step blocks the host: a received tensor, a send and a collective
// make the current stream wait for NCCL's work (c10d's Work::wait without a timeout), and
// finish_step, before the step's first read of the device, checks within the timeout
// that all of it completed, so a peer that dies still ends the run with a message naming
// the transfer. NCCL's own timeout (its watchdog, which would end the process without that
// message) is set to twice HARP's plus a minute, so HARP's check comes first.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "harp/runtime/comm/transport.h"

namespace harp::runtime {

class C10dTransport : public Transport {
 public:
  // Creates the groups this rank belongs to over `store` (shared by all ranks).
  // REQUIRES: every rank of the layout calls it with the same store.
  // `device`: where the tensors of isend, irecv and the dp, tp and tied all-reduces live
  // (CUDA: NCCL, which a build against a CUDA libtorch has; allreduce_world and barrier
  // stay on the CPU). Throws RuntimeFailure when CUDA is asked of a build without NCCL.
  static std::unique_ptr<C10dTransport> create(c10::intrusive_ptr<c10d::Store> store,
                                               const RankLayout& layout,
                                               std::chrono::milliseconds timeout, bool tied_group,
                                               const torch::Device& device = torch::kCPU);
  // Whether this build can create NCCL groups.
  static bool nccl_available();
  ~C10dTransport() override;

  Transfer isend(torch::Tensor& t, int peer, int tag, const std::string& what) override;
  Transfer irecv(torch::Tensor& t, int peer, int tag, const std::string& what) override;
  void allreduce_dp(torch::Tensor& t, const std::string& what) override;
  // A ring over the group's point-to-point channel on Gloo (written when libtorch 1.13's
  // Gloo had no reduce-scatter, and kept: tested equal to one process): dp - 1 rounds,
  // each member sending one chunk to the next; NCCL's own on CUDA. Each member sends
  // (dp - 1)/dp of `flat`, as in half of a ring all-reduce.
  void reduce_scatter_dp(torch::Tensor& flat, torch::Tensor& shard, const std::string& what) override;
  void all_gather_dp(torch::Tensor& shard, torch::Tensor& flat, const std::string& what) override;
  void allreduce_tp(torch::Tensor& t, const std::string& what) override;
  void allreduce_tied(torch::Tensor& t, const std::string& what) override;
  void allreduce_world(torch::Tensor& t, const std::string& what) override;
  void barrier(const std::string& what) override;
  double round_trip(int peer, std::int64_t bytes, bool initiator, const std::string& what) override;
  // NCCL's groups are aborted (their kernels end); pending Gloo work is not cancelled:
  // later calls throw, and peers notice when this process exits and its sockets close.
  void abort(const std::string& reason) override;
  // NCCL: polls each work the streams were made to wait for this step, until the
  // timeout; a work not done by then aborts the groups and throws its description.
  void finish_step() override;

 private:
  struct Groups;
  C10dTransport(RankLayout layout, std::chrono::milliseconds timeout);
  void check_open() const;
  // A collective's end: on NCCL the current stream waits (kept for finish_step), on Gloo
  // the host waits, bounded by the timeout. Throws RuntimeFailure("<what>: <reason>").
  void complete(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);
  // "<what> (data-parallel group of stage S)": what a failed dp collective says.
  std::string in_dp_group(const std::string& what) const;
  std::unique_ptr<Groups> groups_;
  std::string aborted_;  // the reason, once aborted
};

}  // namespace harp::runtime
