// The seam between a training step and its device (DESIGN.md, "One seam for the device"):
// where a rank's compute runs, how a compute span is timed, how compute waits for a
// transfer, and every host synchronisation, counted.
//
// Two implementations, one policy (the executor's):
//   host  CPU tensors. A mark is a steady_clock reading taken at the call; a wait blocks
//         the host until the data is there (Gloo and the in-memory transport complete on
//         the host); synchronize() has nothing to wait for.
//   cuda  the rank's current CUDA stream. A mark is a CUDA event recorded on it, read
//         after the step's synchronize(); a wait makes the stream wait for the transfer's
//         NCCL work and lets the host go on (Transfer::wait_on_stream); synchronize()
//         waits for this stream only, never for the device (cudaDeviceSynchronize would
//         wait for the receives posted ahead on NCCL's streams: the deadlock that
//         tests/runtime_dist/nccl_semantics_test.cc reproduces with the in-memory
//         transport's NCCL rules).
// Both count host synchronisations (synchronize, to_host, synchronize_device) so that a
// CPU test holds a step to its budget (executor.h, StepResult::host_syncs).
//
// Thread-compatible: one per rank, used by the rank's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harp/runtime/comm/transport.h"

namespace harp::runtime {

class ComputeStream {
 public:
  using Mark = int;  // a point on the stream, this step's marks in order

  virtual ~ComputeStream() = default;
  ComputeStream(const ComputeStream&) = delete;
  ComputeStream& operator=(const ComputeStream&) = delete;

  // Starts a step: forgets the last step's marks and returns mark 0, the step's
  // beginning, with the host clock then (the stream is idle: the last step ended in
  // synchronize()).
  Mark begin_step();
  std::chrono::steady_clock::time_point step_begin() const { return step_begin_; }
  // A point on the stream after the work enqueued so far.
  virtual Mark mark() = 0;
  // Seconds from the step's beginning to `m`. REQUIRES: synchronize() after m was made.
  virtual double seconds(Mark m) const = 0;
  // Makes the compute that follows wait for `t` (see the file comment). Throws
  // RuntimeFailure as Transfer::wait does.
  virtual void wait(Transfer& t, std::chrono::milliseconds timeout) = 0;
  // The host waits for the work enqueued on this stream, once `comm` has checked, within
  // its timeout, that the communication the stream waits for completed
  // (Transport::finish_step: a peer that is gone fails there instead of holding the host
  // for ever). Counted.
  void synchronize(Transport& comm);
  // The host waits for all work on the device, communication included (what
  // torch::cuda::synchronize does): never inside a step. On the host, `comm`'s own rule
  // (Transport::synchronize_device). Counted.
  void synchronize_device(Transport& comm, const std::string& what);
  // `t` copied to the host (a synchronisation on CUDA), after the same check. Counted.
  torch::Tensor to_host(Transport& comm, const torch::Tensor& t);
  // A host tensor on this stream's device without blocking the host (pinned staging on
  // CUDA); `t` itself when the stream is the host's.
  virtual torch::Tensor to_device(const torch::Tensor& t) = 0;
  // Whether a mark is the host clock at the call (emulated slower devices need it).
  virtual bool host_timed() const = 0;

  // Host copies of `tensors` as they are after the work enqueued so far, made without
  // holding the stream or the host (an asynchronous checkpoint's snapshot): on CUDA into
  // pinned memory on a side stream, with nothing extra on the device; on the host, clones.
  // `wait` (any thread) returns once the copies are complete. Until the stream has passed
  // fence_copies(), nothing may overwrite the sources.
  struct HostCopies {
    std::vector<torch::Tensor> tensors;
    std::function<void()> wait;
  };
  virtual HostCopies copy_to_host(const std::vector<torch::Tensor>& tensors) = 0;
  // Makes the stream wait for the last copy_to_host's copies (before an update
  // overwrites their sources); nothing when none is pending.
  virtual void fence_copies() = 0;
  // Host synchronisations so far (synchronize, synchronize_device, to_host).
  std::int64_t host_syncs() const { return host_syncs_; }

 protected:
  ComputeStream() = default;
  virtual void synchronize_stream() = 0;
  virtual void synchronize_whole_device(Transport& comm, const std::string& what) = 0;
  virtual void clear_marks() = 0;

 private:
  std::chrono::steady_clock::time_point step_begin_;
  std::int64_t host_syncs_ = 0;
};

// The stream for `device`: the host's for the CPU, the current CUDA stream of the
// calling thread for CUDA (REQUIRES: a CUDA build, the device current on this thread).
std::unique_ptr<ComputeStream> make_compute_stream(const torch::Device& device);

}  // namespace harp::runtime
