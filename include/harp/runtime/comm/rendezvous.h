// Where a run's ranks meet: the c10d store their process groups are made over, from
// what the launcher told the worker (launch::WorkerEnv), or in process for thread ranks.
#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "harp/launch/worker_env.h"

namespace harp::runtime {

// The store for the rank `env` names (launch/worker_env.h). With HARP_STORE_FILE (set by
// harp launch): a c10d FileStore at that path, so a local run listens on no socket for
// its rendezvous. Otherwise the torchrun way: a TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it unless
// TORCHELASTIC_USE_AGENT_STORE says the agent does), which listens on every interface
// and answers anyone (docs/runtime.md). Wrapped in a prefix of the restart count.
// Throws RuntimeFailure (one line) for a bad MASTER_PORT or a failed rendezvous.
c10::intrusive_ptr<c10d::Store> rendezvous_store(const launch::WorkerEnv& env, std::chrono::milliseconds timeout);
// An in-process store for thread ranks (tests).
c10::intrusive_ptr<c10d::Store> hash_store();

}  // namespace harp::runtime
