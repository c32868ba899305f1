// What this build of the runtime was compiled and linked against: libtorch, and for a CUDA
// libtorch the CUDA runtime, cuDNN and NCCL (`harp-train --version`; docs/runtime.md,
// "Building against libtorch").
#pragma once

#include <string>

namespace harp::runtime {

// One line each: libtorch; CUDA (libtorch's runtime, the toolkit harp was compiled with);
// cuDNN (libtorch's, the one loaded); NCCL (the header harp compiled against, the one
// loaded); c10d's backends; GPUs visible; the CPU products' library. Never throws: a
// version that cannot be read says why.
std::string build_info();

// "2.28.9" from libtorch's NCCL version (torch::cuda::nccl::version(): major << 32 |
// minor << 16 | patch); "13.0" from CUDA's (major * 1000 + minor * 10); "9.19.0" from
// cuDNN's (major * 10000 + minor * 100 + patch from 9 on, major * 1000 + ... before).
std::string nccl_version_string(unsigned long long code);
std::string cuda_version_string(long long code);
std::string cudnn_version_string(long long code);

}  // namespace harp::runtime
