// AdamW with warm-up + cosine learning rate and global-norm gradient clipping, written
// out (not torch::optim) so that its state is explicit: checkpoints store it, resumes
// are bitwise, and it behaves identically in every layout (it is elementwise per
// parameter; only the clipping norm is global and is computed by the caller).
// Update order follows torch.optim.AdamW: decay, then the Adam step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace harp::runtime {

struct OptimConfig {
  double lr = 3e-4;           // peak learning rate
  double min_lr = 3e-5;       // floor of the cosine decay
  int warmup_steps = 10;      // linear warm-up from lr / warmup_steps
  int decay_steps = 1000;     // cosine from the end of warm-up to min_lr at this step
  double weight_decay = 0.1;  // applied to parameters with 2+ dimensions only
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;     // max global gradient norm; 0 disables clipping
};

// Learning rate of 0-based step `step`.
double lr_at(const OptimConfig& config, int step);

// The sum of the squares of `tensors` (undefined ones skipped) in float64, whatever their
// dtype, so that the global norm does not depend on how a layout splits the sum: a
// zero-dimensional tensor on `device`, left there (one host read per step, by the
// caller, for all of it).
torch::Tensor squared_norm(const std::vector<torch::Tensor>& tensors, const torch::Device& device);

class AdamW {
 public:
  // The elements of a parameter (flattened) whose state this optimizer keeps and
  // updates: [begin, end). Sharded optimizer state (ZeRO, exec/zero.h) gives each
  // data-parallel replica a part; the others are left to its peers.
  struct Range {
    std::int64_t begin = 0, end = 0;
  };

  // REQUIRES: the parameters outlive the optimizer; `owned` is empty (every element of
  // every parameter) or one range per parameter, within it.
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, OptimConfig config,
        std::vector<Range> owned = {});

  // Sum of squared gradients of the parameters whose name passes `count` (the caller
  // adds these across ranks, counting each parameter once, for the global norm): a
  // float64 scalar on the parameters' device, not read to the host (squared_norm).
  torch::Tensor grad_squared_norm(const std::vector<bool>& count) const;
  // Multiplier for the gradients given the global norm (1 when within grad_clip).
  double clip_scale(double global_norm) const;
  // One update at 0-based step `step` with gradients scaled by `grad_scale` (the
  // gradients are left so scaled). The gradients are the parameters' own, or `grads`
  // (one per parameter: its owned range, flat; undefined: not updated). Nothing is read
  // to the host.
  void step(int step, double grad_scale, const std::vector<torch::Tensor>* grads = nullptr);
  void zero_grad();

  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }
  // State tensors with names "<param>.exp_avg", "<param>.exp_avg_sq" (shaped as their
  // parameter, or flat over the owned range when that is not all of it); and the number
  // of steps taken.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  long long steps_taken() const { return steps_taken_; }
  // Restores state() output of an unsharded optimizer (whole parameters' shapes: each
  // keeps its owned range); InvalidArgument-style message in `error` when a name or
  // shape does not match. Returns false on error.
  bool load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state,
                  long long steps_taken, std::string* error);

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<Range> owned_;  // one per parameter
  std::vector<bool> whole_;   // owned_[i] is all of parameter i
  OptimConfig config_;
  long long steps_taken_ = 0;
  torch::Tensor step_count_;  // steps_taken_ on the parameters' device, for the kernel
};

}  // namespace harp::runtime
