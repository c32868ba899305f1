// build_info (see build_info.h). The CUDA, cuDNN and NCCL figures come from libtorch's
// CUDA hooks and NCCL wrapper, so one file serves a CPU and a CUDA libtorch; the toolkit
// and NCCL header versions come from CMake (src/CMakeLists.txt).
#include "harp/runtime/build_info.h"

#include <exception>
#include <sstream>

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>
#ifdef USE_C10D_NCCL
#include <torch/csrc/cuda/nccl.h>
#endif

#include "harp/runtime/nn/gemm.h"

namespace harp::runtime {
namespace {

template <typename F>
std::string or_reason(F f) {
  try {
    return f();
  } catch (const std::exception& e) {
    std::string what = e.what();
    return "unknown (" + what.substr(0, what.find('\n')) + ")";
  }
}

std::string three(long long major, long long minor, long long patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

#ifdef USE_C10D_NCCL
// "2.28.9" from libtorch's NCCL version (torch::cuda::nccl::version(): major << 32 |
// minor << 16 | patch).
std::string nccl_version_string(unsigned long long code) {
  return three(static_cast<long long>(code >> 32), static_cast<long long>(code >> 16 & 0xffff),
               static_cast<long long>(code & 0xffff));
}
#endif

// "13.0" from CUDA's version (major * 1000 + minor * 10).
std::string cuda_version_string(long long code) {
  return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10);
}

// "9.19.0" from cuDNN's (major * 10000 + minor * 100 + patch from 9 on, major * 1000 +
// minor * 100 + patch before).
std::string cudnn_version_string(long long code) {
  if (code >= 90000) return three(code / 10000, code / 100 % 100, code % 100);
  return three(code / 1000, code / 100 % 10, code % 100);
}

// libtorch's CUDA runtime version, 0 for a CPU libtorch (whose hooks throw).
long long cudart_version(const at::CUDAHooksInterface& cuda) {
  try {
    return cuda.versionCUDART();
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::string build_info() {
  std::ostringstream o;
  o << "libtorch " << TORCH_VERSION << " (C++ ABI " << (_GLIBCXX_USE_CXX11_ABI ? "cxx11" : "pre-cxx11") << ")\n";
  const at::CUDAHooksInterface& cuda = at::detail::getCUDAHooks();
  const long long cudart = cudart_version(cuda);
  const bool cuda_built = cudart > 0;
  if (!cuda_built) {
    o << "CUDA: none (a CPU libtorch)\n";
  } else {
    o << "CUDA " << cuda_version_string(cudart) << " (libtorch's runtime)";
#ifdef HARP_CUDA_TOOLKIT_VERSION
    o << ", harp compiled with the CUDA toolkit " << HARP_CUDA_TOOLKIT_VERSION;
#endif
    o << "\n";
    o << "cuDNN " << or_reason([&] { return cudnn_version_string(cuda.versionCuDNN()); }) << " (libtorch built with), "
      << or_reason([&] { return cudnn_version_string(cuda.versionRuntimeCuDNN()); }) << " loaded\n";
  }
#ifdef USE_C10D_NCCL
  o << "NCCL " << or_reason([] { return nccl_version_string(torch::cuda::nccl::version()); })
    << " loaded";
#ifdef HARP_NCCL_HEADER_VERSION
  o << ", harp compiled against nccl.h " << HARP_NCCL_HEADER_VERSION;
#endif
  o << "\nc10d: Gloo, NCCL\n";
#else
  o << "NCCL: none\nc10d: Gloo\n";
#endif
  o << "GPUs visible: " << or_reason([&] { return std::to_string(cuda_built ? cuda.getNumGPUs() : 0); }) << "\n";
  o << "CPU float32 products: " << (onednn_available() ? "oneDNN sgemm" : "libtorch's BLAS");
  return o.str();
}

}  // namespace harp::runtime
