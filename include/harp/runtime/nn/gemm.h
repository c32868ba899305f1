// Whether this build computes float32 CPU products in oneDNN's sgemm (the linear layer,
// linear.h, and the fused kernels, kernels.h, both stand on it: src/runtime/nn/cpu_gemm.cc).
#pragma once

namespace harp::runtime {

bool onednn_available();

}  // namespace harp::runtime
