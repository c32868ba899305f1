// The host's and CUDA's compute streams (compute_stream.h). The CUDA one goes through
// c10's device-generic interfaces (DeviceGuardImplInterface, c10::Event), so this file
// needs no CUDA header and builds against a CPU-only libtorch too.
#include "harp/runtime/exec/compute_stream.h"

#include <vector>

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "harp/common/check.h"

namespace harp::runtime {
namespace {

using Clock = std::chrono::steady_clock;

class HostStream : public ComputeStream {
 public:
  Mark mark() override {
    marks_.push_back(Clock::now());
    return static_cast<Mark>(marks_.size()) - 1;
  }
  double seconds(Mark m) const override {
    return std::chrono::duration<double>(marks_.at(static_cast<size_t>(m)) - step_begin()).count();
  }
  void wait(Transfer& t, std::chrono::milliseconds timeout) override { t.wait(timeout); }
  torch::Tensor to_device(const torch::Tensor& t) override { return t; }
  bool host_timed() const override { return true; }
  HostCopies copy_to_host(const std::vector<torch::Tensor>& tensors) override {
    HostCopies out{{}, [] {}};
    for (const torch::Tensor& t : tensors) out.tensors.push_back(t.detach().clone());
    return out;
  }
  void fence_copies() override {}

 private:
  void synchronize_stream() override {}
  void synchronize_whole_device(Transport& comm, const std::string& what) override { comm.synchronize_device(what); }
  void clear_marks() override { marks_.clear(); }

  std::vector<Clock::time_point> marks_;
};

// Events are made once and recorded again every step (a CUDA event can be re-recorded);
// timing is on (BACKEND_DEFAULT: cudaEventDefault; c10's PYTORCH_DEFAULT disables it).
class DeviceStream : public ComputeStream {
 public:
  explicit DeviceStream(const torch::Device& device)
      : device_(device), impl_(c10::impl::getDeviceGuardImpl(device.type())) {}

  Mark mark() override {
    if (used_ == events_.size()) events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
    events_[used_].record(impl_->getStream(device_));
    return static_cast<Mark>(used_++);
  }
  double seconds(Mark m) const override {
    HARP_CHECK_LT(static_cast<size_t>(m), used_);
    return events_.front().elapsedTime(events_.at(static_cast<size_t>(m))) / 1000.0;  // ms
  }
  void wait(Transfer& t, std::chrono::milliseconds timeout) override { t.wait_on_stream(timeout); }
  torch::Tensor to_device(const torch::Tensor& t) override {
    // From pinned memory the copy is asynchronous; libtorch keeps the pinned block until
    // the copy is done (its host allocator records the stream).
    return t.pin_memory().to(device_, /*non_blocking=*/true);
  }
  bool host_timed() const override { return false; }

  HostCopies copy_to_host(const std::vector<torch::Tensor>& tensors) override {
    // A side stream starts where the compute stream is now and copies into pinned host
    // memory (asynchronous: the DMA engine, beside the next steps' kernels); the sources
    // are marked as used there, so the caching allocator keeps a temporary one (a tp
    // gather) until the copy is done.
    const c10::Stream compute = impl_->getStream(device_);
    const c10::Stream side = impl_->getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
    c10::Event start(device_.type());
    start.record(compute);
    start.block(side);
    HostCopies out;
    const c10::Stream previous = impl_->exchangeStream(side);
    for (const torch::Tensor& t : tensors) {
      torch::Tensor host = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
      host.copy_(t.detach(), /*non_blocking=*/true);
      impl_->recordDataPtrOnStream(t.storage().data_ptr(), side);
      out.tensors.push_back(std::move(host));
    }
    impl_->exchangeStream(previous);
    auto done = std::make_shared<c10::Event>(device_.type());
    done->record(side);
    copies_done_ = done;
    out.wait = [done] { done->synchronize(); };
    return out;
  }
  void fence_copies() override {
    if (!copies_done_) return;
    copies_done_->block(impl_->getStream(device_));
    copies_done_.reset();
  }

 private:
  void synchronize_stream() override { impl_->synchronizeStream(impl_->getStream(device_)); }
  void synchronize_whole_device(Transport&, const std::string&) override { impl_->synchronizeDevice(device_.index()); }
  void clear_marks() override { used_ = 0; }

  torch::Device device_;
  const c10::impl::DeviceGuardImplInterface* impl_;
  std::vector<c10::Event> events_;
  size_t used_ = 0;
  std::shared_ptr<c10::Event> copies_done_;  // the last copy_to_host's, until fenced
};

}  // namespace

ComputeStream::Mark ComputeStream::begin_step() {
  clear_marks();
  step_begin_ = Clock::now();
  return mark();
}

void ComputeStream::synchronize(Transport& comm) {
  comm.finish_step();
  ++host_syncs_;
  synchronize_stream();
}

void ComputeStream::synchronize_device(Transport& comm, const std::string& what) {
  ++host_syncs_;
  synchronize_whole_device(comm, what);
}

torch::Tensor ComputeStream::to_host(Transport& comm, const torch::Tensor& t) {
  comm.finish_step();
  ++host_syncs_;
  return t.to(torch::kCPU);
}

std::unique_ptr<ComputeStream> make_compute_stream(const torch::Device& device) {
  if (device.is_cpu()) return std::make_unique<HostStream>();
  return std::make_unique<DeviceStream>(device);
}

}  // namespace harp::runtime
