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
// communicator cannot deadlock two ranks waiting on different pairs. The world group
// stays Gloo's, on the CPU, for the metrics reduction and barriers.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

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
  // Pending Gloo work is not cancelled: later calls throw, and peers
  // notice when this process exits and its sockets close.
  void abort(const std::string& reason) override;

 private:
  struct Groups;
  C10dTransport(RankLayout layout, std::chrono::milliseconds timeout);
  void check_open() const;
  // "<what> (data-parallel group of stage S)": what a failed dp collective says.
  std::string in_dp_group(const std::string& what) const;
  std::unique_ptr<Groups> groups_;
  std::string aborted_;  // the reason, once aborted
};

}  // namespace harp::runtime
