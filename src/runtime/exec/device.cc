// A rank's device and threads (see device.h).
#include "harp/runtime/exec/device.h"

#include <dlfcn.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include "harp/common/check.h"
#include "harp/runtime/nn/gemm.h"

namespace harp::runtime {

torch::Dtype torch_dtype(config::Dtype dtype) {
  switch (dtype) {
    case config::Dtype::kFloat64:
      return torch::kFloat64;
    case config::Dtype::kBFloat16:
      return torch::kBFloat16;
    case config::Dtype::kFloat16:
      return torch::kHalf;
    case config::Dtype::kFloat32:
      break;
  }
  return torch::kFloat32;
}

StatusOr<torch::Device> resolve_device(config::Device device, int local_rank) {
  const bool cuda = torch::cuda::is_available();
  if (device == config::Device::kCpu || (device == config::Device::kAuto && !cuda)) return torch::Device(torch::kCPU);
  if (!cuda)
    return failed_precondition("device cuda: libtorch sees no CUDA device (a CPU build of libtorch, or no GPU); use "
                               "`--device cpu`, or build against a CUDA libtorch (docs/runtime.md, \"GPUs\")");
  const int count = static_cast<int>(torch::cuda::device_count());
  if (local_rank < 0 || local_rank >= count)
    return failed_precondition("LOCAL_RANK " + std::to_string(local_rank) + " but this machine has " +
                               std::to_string(count) + " CUDA device(s); launch at most " + std::to_string(count) +
                               " ranks per machine");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

Status check_dtype_on_device(config::Dtype dtype, const torch::Device& device) {
  if (device.is_cpu() && dtype == config::Dtype::kFloat16)
    return failed_precondition("dtype float16 computes on CUDA only, and this runs on the CPU; use bfloat16 on the "
                               "CPU, or a GPU");
  return Status();
}

void set_current_device(const torch::Device& device) {
  HARP_CHECK(device.is_cuda()) << "set_current_device takes a CUDA device";
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
}

void set_compute_threads(int threads, torch::Dtype dtype) {
  using SetThreads = void (*)(int);
  auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  // float32 products in oneDNN and bf16 ones in libtorch's oneDNN both run on torch's
  // OpenMP pool, as MKL does; only an OpenBLAS libtorch's float64 (or float32 without
  // oneDNN) leaves them to OpenBLAS's own threads.
  const bool on_torch_pool =
      dtype == torch::kBFloat16 || dtype == torch::kHalf || (dtype == torch::kFloat32 && onednn_available());
  const bool blas = set_blas != nullptr && !on_torch_pool;
  torch::set_num_threads(blas ? 1 : threads);
  if (set_blas) set_blas(blas ? threads : 1);
}

}  // namespace harp::runtime
