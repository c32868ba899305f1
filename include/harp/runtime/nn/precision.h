// Mixed precision (docs/runtime.md, Mixed precision). A run's compute dtype is float32,
// float64, bfloat16 or float16; bfloat16 and float16 mean float32 parameters, gradients
// and AdamW state (the master weights) with the forward under libtorch's autocast to that
// dtype (matrix products in it, the loss and the norms' statistics in float32), and the
// tensors crossing stage cuts in it. float16 is the CUDA path (refused on the CPU, whose
// autocast supported bf16 only when this was written, under libtorch 1.13); it comes with
// dynamic loss scaling (LossScaler), which runs and is tested on any dtype.
#pragma once

#include <torch/torch.h>

namespace harp::runtime {

// The dtype parameters are built and trained in for a compute dtype.
inline torch::Dtype param_dtype(torch::Dtype compute) {
  return compute == torch::kBFloat16 || compute == torch::kHalf ? torch::kFloat32 : compute;
}

// A thread's autocast: whether it is on, for which device type, to which dtype.
struct AutocastState {
  bool on = false;
  c10::DeviceType device = c10::DeviceType::CPU;
  at::ScalarType dtype = at::kBFloat16;
};

// Autocast on this thread while alive (libtorch has no C++ guard; Python's torch.autocast
// does the same): nests, and restores the previous state. The state is thread-local:
// construct it on the thread that computes.
class AutocastGuard {
 public:
  // Autocast to `compute` on `device`'s type when `compute` is bf16 or fp16; nothing for
  // float32 and float64.
  AutocastGuard(torch::Dtype compute, const torch::Device& device);
  // bf16 on the CPU when `on`.
  explicit AutocastGuard(bool on) : AutocastGuard(on ? torch::kBFloat16 : torch::kFloat32, torch::kCPU) {}
  // Re-establishes a state captured with current() (a recomputation reruns its forward
  // in the forward's precision).
  explicit AutocastGuard(const AutocastState& state)
      : AutocastGuard(state.on ? state.dtype : torch::kFloat32, torch::Device(state.device)) {}
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  // Whether autocast is on for this thread now, on the CPU or on CUDA.
  static bool active();
  // This thread's autocast now (the CPU's if both were on).
  static AutocastState current();

 private:
  bool on_ = false, was_enabled_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// Keeps autocast's low-precision copies of the weights while alive: AutocastGuards inside
// it (each microbatch's) leave its cache alone, and it clears the cache at its end. A
// step holds one, so each weight is cast once a step, not once a microbatch, and one copy
// serves every microbatch in flight. Turns nothing on by itself. REQUIRES: the weights
// do not change while it lives (it ends before the next step's casts, after the update).
class AutocastCacheScope {
 public:
  explicit AutocastCacheScope(torch::Dtype compute);
  ~AutocastCacheScope();
  AutocastCacheScope(const AutocastCacheScope&) = delete;
  AutocastCacheScope& operator=(const AutocastCacheScope&) = delete;

 private:
  bool on_ = false;
};

// Dynamic loss scaling, as torch.cuda.amp.GradScaler does it: the loss is multiplied by
// `scale` before the backward, so that float16 gradients do not underflow; a step whose
// gradients are not all finite (on any rank) is skipped and the scale halved; after
// `growth_interval` finite steps in a row it doubles. The scales are powers of two, so
// scaling and unscaling are exact: a run with scaling has the gradients, and so the
// parameters, of the run without, bit for bit, as long as nothing overflows.
struct LossScaler {
  double scale = 0;  // 0: off
  int growth_interval = 2000;
  int good_steps = 0;  // finite steps since the scale last changed
  // The cap: float32's largest power of two (GradScaler has none; any float32 loss of 2
  // or more overflows above it).
  static constexpr double kMinScale = 1.0, kMaxScale = 0x1p127;

  bool enabled() const { return scale > 0; }
  // After a step's gradients are known: whether to apply the step; moves the scale.
  bool update(bool finite);
};

}  // namespace harp::runtime
