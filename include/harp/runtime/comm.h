// The c10d transport (transport.h): process groups for one rank of a plan (Gloo on CPU;
// NCCL would slot in behind the same class). The world group carries point-to-point
// transfers between neighbouring stages and the end-of-step reduction; one group per
// data-parallel group of a stage; one group for the tied embedding (the ranks of the
// first and the last stage).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "harp/runtime/transport.h"

namespace harp::runtime {

class C10dTransport : public Transport {
 public:
  // Creates the groups this rank belongs to over `store` (shared by all ranks).
  // REQUIRES: every rank of the layout calls it with the same store.
  static std::unique_ptr<C10dTransport> create(c10::intrusive_ptr<c10d::Store> store,
                                               const RankLayout& layout,
                                               std::chrono::milliseconds timeout, bool tied_group);
  ~C10dTransport() override;

  Transfer isend(torch::Tensor& t, int peer, int tag, const std::string& what) override;
  Transfer irecv(torch::Tensor& t, int peer, int tag, const std::string& what) override;
  void allreduce_dp(torch::Tensor& t, const std::string& what) override;
  void allreduce_tp(torch::Tensor& t, const std::string& what) override;
  void allreduce_tied(torch::Tensor& t, const std::string& what) override;
  void allreduce_world(torch::Tensor& t, const std::string& what) override;
  void barrier(const std::string& what) override;
  // Gloo in libtorch 1.13 cannot cancel pending work: later calls throw, and peers
  // notice when this process exits and its sockets close.
  void abort(const std::string& reason) override;

 private:
  struct Groups;
  C10dTransport(RankLayout layout, std::chrono::milliseconds timeout);
  void check_open() const;
  std::unique_ptr<Groups> groups_;
  std::string aborted_;  // the reason, once aborted
};

// The store for a rank. With HARP_STORE_FILE (set by harp launch): a c10d FileStore at
// that path, so a local run listens on no socket for its rendezvous. Otherwise the
// torchrun way: a TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it unless
// TORCHELASTIC_USE_AGENT_STORE says the agent does), which listens on every interface
// and answers anyone (docs/runtime.md). Wrapped in a prefix of the restart count.
// Throws RuntimeFailure (one line) for a bad MASTER_PORT or a failed rendezvous.
c10::intrusive_ptr<c10d::Store> store_from_env(int rank, int world_size, std::chrono::milliseconds timeout);
// An in-process store for thread ranks (tests).
c10::intrusive_ptr<c10d::Store> hash_store();

}  // namespace harp::runtime
