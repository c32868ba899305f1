// AdamW on libtorch's fused kernel (torch.optim.AdamW(fused=True)), its state ours to
// checkpoint. The kernel's math is torch::optim::AdamW's (decoupled decay, then the
// moments, then the update) in another order of operations: within a few ulps of it
// (tests/runtime/optimizer_test.cc compares the two). On the CPU too it beats the
// per-tensor loop it replaced, 3-10x (docs/runtime.md). No amsgrad.
#include "harp/runtime/exec/optimizer.h"

#include <cmath>
#include <optional>

#include "harp/common/check.h"

namespace harp::runtime {

double lr_at(const OptimConfig& config, int step) {
  if (step < config.warmup_steps) return config.lr * (step + 1) / config.warmup_steps;
  if (step >= config.decay_steps) return config.min_lr;
  const double ratio = static_cast<double>(step - config.warmup_steps) /
                       static_cast<double>(config.decay_steps - config.warmup_steps);
  const double pi = std::acos(-1.0);
  return config.min_lr + 0.5 * (1.0 + std::cos(pi * ratio)) * (config.lr - config.min_lr);
}

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, OptimConfig config,
             std::vector<Range> owned)
    : params_(std::move(params)), owned_(std::move(owned)), config_(config) {
  HARP_CHECK(owned_.empty() || owned_.size() == params_.size());
  // Allocated up front (torch allocates on first step): the state exists before the
  // first step, so a checkpoint at step 0 has the same keys as any other.
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i].second;
    if (owned_.size() < params_.size()) owned_.push_back(Range{0, p.numel()});
    const Range r = owned_[i];
    HARP_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= p.numel()) << params_[i].first;
    whole_.push_back(r.begin == 0 && r.end == p.numel());
    if (whole_[i]) {
      exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    } else {
      exp_avg_.push_back(torch::zeros({r.end - r.begin}, p.options()));
      exp_avg_sq_.push_back(torch::zeros({r.end - r.begin}, p.options()));
    }
  }
}

torch::Tensor squared_norm(const std::vector<torch::Tensor>& tensors, const torch::Device& device) {
  std::vector<torch::Tensor> defined;
  for (const torch::Tensor& t : tensors)
    if (t.defined()) defined.push_back(t);
  if (defined.empty()) return torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  // One foreach kernel for every tensor's norm (accumulated in float64) on CUDA, then
  // their squares summed: no synchronisation, and a few kernels where one per tensor
  // would take several each.
  return torch::stack(at::_foreach_norm(defined, 2, torch::kFloat64)).pow(2).sum();
}

torch::Tensor AdamW::grad_squared_norm(const std::vector<bool>& count) const {
  HARP_CHECK_EQ(count.size(), params_.size());
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params_.size(); ++i)
    if (count[i]) grads.push_back(params_[i].second.grad());
  return squared_norm(grads, params_.empty() ? torch::Device(torch::kCPU) : params_.front().second.device());
}

double AdamW::clip_scale(double global_norm) const {
  if (config_.grad_clip <= 0) return 1.0;
  // torch.nn.utils.clip_grad_norm_'s formula, including its 1e-6 guard.
  const double scale = config_.grad_clip / (global_norm + 1e-6);
  return scale < 1.0 ? scale : 1.0;
}

void AdamW::step(int step, double grad_scale, const std::vector<torch::Tensor>* grads) {
  HARP_CHECK(grads == nullptr || grads->size() == params_.size());
  torch::NoGradGuard no_grad;
  ++steps_taken_;
  // Two groups, as in GPT-2 and nanoGPT: parameters of 2+ dimensions decayed, biases,
  // norms and other 1-D parameters not. Each is one call of the fused kernel (one pass
  // over its tensors on CUDA; a vectorised loop on the CPU).
  struct Group {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  } groups[2];
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& whole = params_[i].second;
    const torch::Tensor& g = grads ? (*grads)[i] : whole.grad();
    if (!g.defined() || owned_[i].end == owned_[i].begin) continue;
    // The owned range, as a view of the parameter (elementwise: the same values).
    torch::Tensor p = whole_[i] ? whole : whole.view({-1}).slice(0, owned_[i].begin, owned_[i].end);
    Group& group = groups[config_.weight_decay != 0 && whole.dim() >= 2 ? 0 : 1];
    group.params.push_back(p);
    group.grads.push_back(g.sizes() == p.sizes() ? g : g.view(p.sizes()));  // a flat shard of a whole parameter
    group.exp_avgs.push_back(exp_avg_[i]);
    group.exp_avg_sqs.push_back(exp_avg_sq_[i]);
  }
  if (groups[0].params.empty() && groups[1].params.empty()) return;
  const torch::Device device = (groups[0].params.empty() ? groups[1] : groups[0]).params.front().device();
  // The step count (the bias corrections' exponent) and the gradients' scale are read by
  // the kernel from tensors on the device: filled here, never read back.
  if (!step_count_.defined() || step_count_.device() != device)
    step_count_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  step_count_.fill_(static_cast<double>(steps_taken_));
  // The kernel divides the gradients by grad_scale (and writes them back so).
  std::optional<torch::Tensor> inverse_scale;
  if (grad_scale != 1.0) inverse_scale = torch::full({}, 1.0 / grad_scale, step_count_.options());
  const double lr = lr_at(config_, step);
  for (int k = 0; k < 2; ++k) {
    Group& group = groups[k];
    if (group.params.empty()) continue;
    const std::vector<torch::Tensor> steps(group.params.size(), step_count_);
    at::_fused_adamw_(group.params, group.grads, group.exp_avgs, group.exp_avg_sqs, {}, steps, lr, config_.beta1,
                      config_.beta2, k == 0 ? config_.weight_decay : 0.0, config_.eps, /*amsgrad=*/false,
                      /*maximize=*/false, inverse_scale, std::nullopt);
  }
}

void AdamW::zero_grad() {
  // Zero-filled rather than reset: identical in libtorch 1.13 and 2.x, and accumulation
  // into an existing buffer is what the runtime's microbatch loop expects.
  for (auto& [name, p] : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(params_[i].first + ".exp_avg", exp_avg_[i]);
    out.emplace_back(params_[i].first + ".exp_avg_sq", exp_avg_sq_[i]);
  }
  return out;
}

bool AdamW::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state,
                       long long steps_taken, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return false;
  };
  if (steps_taken < 0) return fail("optimizer state has a negative step count");
  const auto expected = this->state();
  if (state.size() != expected.size())
    return fail("optimizer state has " + std::to_string(state.size()) + " tensors but " +
                std::to_string(expected.size()) + " are expected (two per parameter); the "
                "checkpoint belongs to a different model or stage");
  // Validate everything before copying anything, so a failed load changes nothing.
  for (size_t i = 0; i < state.size(); ++i) {
    const auto& [name, t] = state[i];
    if (name != expected[i].first)
      return fail("optimizer state entry " + std::to_string(i) + " is `" + name + "` but `" +
                  expected[i].first + "` is expected");
    if (!t.defined() || t.sizes() != params_[i / 2].second.sizes())
      return fail("optimizer state `" + name + "` has the wrong shape for its parameter");
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto mine = [&](const torch::Tensor& t) {
      return whole_[i] ? t : t.reshape({-1}).slice(0, owned_[i].begin, owned_[i].end);
    };
    exp_avg_[i].copy_(mine(state[2 * i].second));
    exp_avg_sq_[i].copy_(mine(state[2 * i + 1].second));
  }
  steps_taken_ = steps_taken;
  return true;
}

}  // namespace harp::runtime
