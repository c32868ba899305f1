// A rank's device and its threads: the torch device and dtype of a training
// configuration's settings (config/names.h), the CUDA device current, and the compute
// threads.
#pragma once

#include <torch/torch.h>

#include "harp/common/status.h"
#include "harp/config/names.h"

namespace harp::runtime {

// The torch dtype of a training dtype (ExecConfig::dtype).
torch::Dtype torch_dtype(config::Dtype dtype);

// The device of a training device setting (auto | cpu | cuda) for the rank that
// LOCAL_RANK `local_rank` names: cuda:LOCAL_RANK, as torchrun's ranks take theirs.
// FailedPrecondition when CUDA is asked for and libtorch sees none, or too few devices.
StatusOr<torch::Device> resolve_device(config::Device device, int local_rank);
// FailedPrecondition when a TrainConfig dtype cannot compute on `device` (float16 needs
// CUDA: libtorch's CPU autocast is bf16 only). TrainConfig::validate refuses `device:
// cpu` with float16; this covers `auto` once resolved.
Status check_dtype_on_device(config::Dtype dtype, const torch::Device& device);

// A CUDA device as libtorch sees it: its name and compute capability.
struct CudaDeviceInfo {
  std::string name;
  int major = 0, minor = 0;
};
// The kernel images a libtorch carries, from its build configuration (at::show_config's
// "NVCC architecture flags: -gencode;arch=compute_75,code=sm_75;..."): "sm_75", ... and
// "compute_90" for PTX; empty when the text has none (a CPU libtorch).
std::vector<std::string> cuda_archs_of(const std::string& config_text);
// Whether kernels built for `archs` run on capability major.minor: a cubin sm_XY on the
// same major from minor Y up, PTX compute_XY on X.Y and later (compiled by the driver).
bool archs_run_on(const std::vector<std::string>& archs, int major, int minor);
// The rank's GPU against its libtorch and dtype, each refusal one line: a GPU whose
// architecture libtorch has no kernels for (a V100 under a CUDA 13 PyTorch, which starts
// at sm_75), and bfloat16 (the dtype or the gradient reduction) on a GPU before sm_80.
// `archs` empty: unknown, not checked.
Status check_cuda_device(const CudaDeviceInfo& gpu, const std::vector<std::string>& archs, bool bfloat16);
// The device's name and capability, from the CUDA driver's C API (major 0 where there is
// no driver), and libtorch's kernel images (empty for a CPU libtorch). REQUIRES:
// device.is_cuda().
CudaDeviceInfo cuda_device_info(const torch::Device& device);
std::vector<std::string> libtorch_cuda_archs();
// Makes `device` this process's current CUDA device (NCCL's groups and the caching
// allocator use it). REQUIRES: device.is_cuda().
void set_current_device(const torch::Device& device);

// Gives this process `threads` cores for compute, without nesting two thread pools
// (measured here: 2 torch threads + 2 BLAS threads made a step 2.4x slower). float32
// products run in oneDNN (linear.h) and bf16 ones in libtorch's oneDNN, both on torch's
// OpenMP intra-op pool: torch gets the threads. PyPI's libtorch computes its own products
// (float64; float32 in a build without oneDNN) in MKL on that same pool. A libtorch on
// OpenBLAS (Debian's) spends most of a float64 step in OpenBLAS's gemm: there BLAS gets
// the threads and torch's pool one.
void set_compute_threads(int threads, torch::Dtype dtype = torch::kFloat32);

}  // namespace harp::runtime
