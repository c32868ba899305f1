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

}  // namespace harp::runtime
