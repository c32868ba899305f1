// Process groups for one rank of a plan (Gloo on CPU; NCCL would slot in behind the
// same class): the world group carries point-to-point transfers between neighbouring
// stages and the end-of-step reduction; one group per data-parallel group of a stage;
// one group for the tied embedding (the ranks of the first and the last stage).
//
// Every wait is bounded: a peer that dies or stalls surfaces as a RuntimeFailure whose
// message names the peer rank, the awaited action and the step.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include "harp/common/status.h"
#include "harp/plan/plan.h"

namespace harp::runtime {

// A failure of the distributed run (peer death, timeout): caught at the CLI boundary.
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Which rank runs what. Ranks are numbered stage by stage: stage 0's dp replicas first.
struct RankLayout {
  int rank = 0, world_size = 1;
  int stage = 0, dp_rank = 0;
  std::vector<std::vector<int>> stage_ranks;  // global ranks of every stage's replicas

  int num_stages() const { return static_cast<int>(stage_ranks.size()); }
  int dp() const { return static_cast<int>(stage_ranks[stage].size()); }
};

// FailedPrecondition when the plan needs a different number of ranks, or uses tensor
// parallelism (not supported by this runtime yet).
StatusOr<RankLayout> layout_for(const plan::Plan& plan, int world_size, int rank);

// A pending transfer; wait() throws RuntimeFailure with "`what` <peer>: <reason>" on
// failure or timeout (so `what` ends with "from rank" or "to rank").
class Transfer {
 public:
  Transfer() = default;
  Transfer(std::shared_ptr<void> work, std::string what, int peer);
  void wait(std::chrono::milliseconds timeout);
  bool pending() const { return work_ != nullptr; }

 private:
  std::shared_ptr<void> work_;  // c10d work, type-erased to keep c10d out of this header
  std::string what_;
  int peer_ = -1;
};

class Comm {
 public:
  // Creates the groups this rank belongs to over `store` (shared by all ranks).
  // REQUIRES: every rank of the layout calls it with the same store.
  static std::unique_ptr<Comm> create(c10::intrusive_ptr<c10d::Store> store, const RankLayout& layout,
                                      std::chrono::milliseconds timeout, bool tied_group);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  const RankLayout& layout() const { return layout_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Contiguous CPU tensors; the caller keeps them alive until the transfer completes.
  Transfer isend(torch::Tensor& t, int peer, int tag, const std::string& what);
  Transfer irecv(torch::Tensor& t, int peer, int tag, const std::string& what);
  // Sum over the stage's data-parallel group (no-op when dp == 1).
  void allreduce_dp(torch::Tensor& t, const std::string& what);
  // Sum over the tied-embedding group (first and last stage). REQUIRES tied_group.
  void allreduce_tied(torch::Tensor& t, const std::string& what);
  // Sum over every rank.
  void allreduce_world(torch::Tensor& t, const std::string& what);
  void barrier(const std::string& what);

 private:
  struct Groups;
  Comm(RankLayout layout, std::chrono::milliseconds timeout);
  RankLayout layout_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Groups> groups_;
};

// The store for a rank: TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it unless
// TORCHELASTIC_USE_AGENT_STORE says the agent does), wrapped in a prefix.
c10::intrusive_ptr<c10d::Store> tcp_store_from_env(int rank, int world_size,
                                                   std::chrono::milliseconds timeout);
// An in-process store for thread ranks (tests).
c10::intrusive_ptr<c10d::Store> hash_store();

}  // namespace harp::runtime
