// Mixed precision (docs/runtime.md, Mixed precision). A run's compute dtype is float32,
// float64 or bfloat16; bfloat16 means float32 parameters, gradients and AdamW state (the
// master weights) with the forward under libtorch's autocast to bfloat16 (matrix
// products in bf16, the loss and the norms' statistics in float32), and the tensors
// crossing stage cuts in bfloat16. libtorch's CPU autocast supports only bf16; fp16 with
// dynamic loss scaling is the CUDA path (not built here).
#pragma once

#include <torch/torch.h>

namespace harp::runtime {

// The dtype parameters are built and trained in for a compute dtype.
inline torch::Dtype param_dtype(torch::Dtype compute) {
  return compute == torch::kBFloat16 ? torch::kFloat32 : compute;
}

// Autocast to bf16 on this thread while alive, when `on` (else nothing); nests, and
// restores the previous state (libtorch has no C++ guard; Python's torch.autocast does
// the same). The state is thread-local: construct it on the thread that computes.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool on);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  // Whether autocast to bf16 is on for this thread now.
  static bool active();

 private:
  bool on_ = false, was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

}  // namespace harp::runtime
