// A rank's device and threads (see device.h).
#include "harp/runtime/exec/device.h"

#include <dlfcn.h>

#include <algorithm>
#include <sstream>

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
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

std::vector<std::string> cuda_archs_of(const std::string& config_text) {
  std::vector<std::string> out;
  const std::string key = "code=";
  for (size_t at = config_text.find(key); at != std::string::npos; at = config_text.find(key, at + 1)) {
    size_t begin = at + key.size(), end = config_text.find_first_of(";\n ", begin);
    std::string codes = config_text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (!codes.empty() && codes.front() == '[') codes = codes.substr(1, codes.find(']') - 1);
    std::istringstream items(codes);
    for (std::string item; std::getline(items, item, ',');)
      if ((item.rfind("sm_", 0) == 0 || item.rfind("compute_", 0) == 0) &&
          std::find(out.begin(), out.end(), item) == out.end())
        out.push_back(item);
  }
  return out;
}

bool archs_run_on(const std::vector<std::string>& archs, int major, int minor) {
  for (const std::string& a : archs) {
    const bool ptx = a.rfind("compute_", 0) == 0;
    const std::string digits = a.substr(a.find('_') + 1);
    if (digits.size() < 2 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    // "120" is 12.0: the last digit is the minor version (a suffix such as 90a is skipped).
    const int a_major = std::stoi(digits.substr(0, digits.size() - 1)), a_minor = digits.back() - '0';
    if (ptx ? (major > a_major || (major == a_major && minor >= a_minor)) : (major == a_major && minor >= a_minor))
      return true;
  }
  return false;
}

Status check_cuda_device(const CudaDeviceInfo& gpu, const std::vector<std::string>& archs, bool bfloat16) {
  const std::string sm = "sm_" + std::to_string(gpu.major) + std::to_string(gpu.minor);
  if (!archs.empty() && !archs_run_on(archs, gpu.major, gpu.minor)) {
    std::string list;
    for (const std::string& a : archs) list += (list.empty() ? "" : " ") + a;
    return failed_precondition(gpu.name + " is " + sm + ", and this build's libtorch carries kernels for " + list +
                               " only (torch.cuda.get_arch_list()); fix: build HARP against a PyTorch with " + sm +
                               (gpu.major < 7 || (gpu.major == 7 && gpu.minor < 5)
                                    ? " (for Volta: PyPI's torch 2.10.0 (CUDA 12.8), `make TORCH_VERSION=2.10.0`; "
                                      "docs/runtime.md, \"Volta\")"
                                    : "") +
                               ", or leave this GPU out");
  }
  if (bfloat16 && gpu.major < 8)
    return failed_precondition(gpu.name + " is " + sm +
                               ", which has no bfloat16 arithmetic (from sm_80 on); fix: train in float16 (`--dtype "
                               "float16`, dynamic loss scaling) and reduce gradients in float16 or float32");
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

CudaDeviceInfo cuda_device_info(const torch::Device& device) {
  HARP_CHECK(device.is_cuda()) << "cuda_device_info takes a CUDA device";
  // The driver's own answer through its C API (libcuda, whose calls and attribute numbers
  // have not changed across CUDA versions): no CUDA header's struct is involved, so a
  // build whose toolkit is not libtorch's CUDA (a Volta build) reads it right too.
  CudaDeviceInfo out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) return out;
  using Init = int (*)(unsigned);
  using Get = int (*)(int*, int);
  using Attribute = int (*)(int*, int, int);
  using Name = int (*)(char*, int, int);
  const auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  const auto get = reinterpret_cast<Get>(dlsym(lib, "cuDeviceGet"));
  const auto attribute = reinterpret_cast<Attribute>(dlsym(lib, "cuDeviceGetAttribute"));
  const auto name = reinterpret_cast<Name>(dlsym(lib, "cuDeviceGetName"));
  int dev = 0;
  if (init == nullptr || get == nullptr || attribute == nullptr || name == nullptr || init(0) != 0 ||
      get(&dev, std::max<int>(0, device.index())) != 0)
    return out;
  constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
  int major = 0, minor = 0;
  char text[256] = {};
  if (attribute(&major, kMajor, dev) != 0 || attribute(&minor, kMinor, dev) != 0) return out;
  out.major = major;
  out.minor = minor;
  out.name = name(text, sizeof text - 1, dev) == 0 ? text : "cuda:" + std::to_string(device.index());
  return out;
}

std::vector<std::string> libtorch_cuda_archs() {
  try {
    return cuda_archs_of(at::detail::getCUDAHooks().showConfig());
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace harp::runtime
