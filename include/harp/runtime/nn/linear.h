// The runtime's matrix products: y = x Wᵀ + b for every projection of the layers (gpt.h).
//
// On the CPU in float32 the products run in oneDNN's sgemm (when the build found oneDNN:
// Debian's libdnnl, the library Debian's libtorch itself links), as an autograd function
// whose backward is two more sgemm calls (dx = dy W, dW = dyᵀ x) and a column sum (db).
// oneDNN picks its kernels for the CPU it runs on and runs them on the OpenMP pool that
// torch's intra-op threads are, so one pool serves the products and the element-wise
// operations (set_compute_threads, trainer.h). Measured on this project's CPUs, it is
// 1.5-3x OpenBLAS's sgemm at one thread on the layer shapes of a small GPT
// (docs/runtime.md, "Speed on one device").
//
// Everything else (CUDA tensors, float64, a forward under bf16 autocast, a build
// without oneDNN) goes to torch::linear, with the same result up to float32 rounding.
#pragma once

#include <torch/torch.h>

#include "harp/runtime/nn/gemm.h"  // onednn_available: whether this build has the oneDNN path

namespace harp::runtime {

// x [..., K], w [N, K], b [N] or undefined; returns [..., N]. Differentiable in all three.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {});

// Whether linear() takes the oneDNN path for these operands (tests and benchmarks).
bool linear_uses_onednn(const torch::Tensor& x, const torch::Tensor& w);

}  // namespace harp::runtime
