// The one place that sees Gloo's headers: a Gloo process group made and handed back as
// c10d's Backend, so no other file of the project includes ProcessGroupGloo.hpp.
//
// Why one place: PyPI's torch wheel ships c10d's ProcessGroupGloo.hpp but not the Gloo
// headers it includes; Debian's libgloo-dev supplies them (the Makefile installs it), and
// they describe Gloo 0.5.0 of 2022-05-18, not the newer Gloo compiled into libtorch. The
// pairing is sound because this file touches Gloo only by pointer: it moves
// shared_ptr<gloo::transport::Device> values that libtorch made into a vector of
// libtorch's Options type, and calls out-of-line functions that libtorch defines. No Gloo
// layout, inline Gloo function or vtable of a class deriving from Gloo's is compiled
// here; tests/build/check_gloo_abi.sh fails the build's tests the day one is.
#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "harp/launch/worker_env.h"

namespace harp::runtime {

// A Gloo group of `size` ranks under its own store prefix `name`, bound to the address
// `env` gives this host (harp launch --testbed's, 127.0.0.1 for a local run,
// GLOO_SOCKET_IFNAME's interface, or the host's default), with two Gloo threads.
c10::intrusive_ptr<c10d::Backend> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const std::string& name, int rank, int size,
                                                  std::chrono::milliseconds timeout, const launch::WorkerEnv& env);

}  // namespace harp::runtime
