// AdamW written out with the exact tensor operations of libtorch's torch::optim::AdamW
// (decoupled decay, then the moments, then addcdiv), so both agree to the last bit and
// the state is ours to checkpoint. No amsgrad, no foreach/fused variants.
#include "harp/runtime/exec/optimizer.h"

#include <cmath>

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

double AdamW::grad_squared_norm(const std::vector<bool>& count) const {
  HARP_CHECK_EQ(count.size(), params_.size());
  double sum = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& g = params_[i].second.grad();
    if (!count[i] || !g.defined()) continue;
    // float64 whatever the model dtype, so the norm does not depend on the layout's
    // split of the sum into per-parameter pieces at float32 precision.
    sum += g.to(torch::kFloat64).pow(2).sum().item<double>();
  }
  return sum;
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
  const double lr = lr_at(config_, step);
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double bias_correction1 = 1 - std::pow(b1, static_cast<double>(steps_taken_));
  const double bias_correction2 = 1 - std::pow(b2, static_cast<double>(steps_taken_));
  const double step_size = lr / bias_correction1;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& whole = params_[i].second;
    const torch::Tensor& g = grads ? (*grads)[i] : whole.grad();
    if (!g.defined() || owned_[i].end == owned_[i].begin) continue;
    // The owned range, as a view of the parameter (elementwise: the same values).
    torch::Tensor p = whole_[i] ? whole : whole.view({-1}).slice(0, owned_[i].begin, owned_[i].end);
    // Scaling by exactly 1 is skipped so an unclipped step is bitwise torch's.
    const torch::Tensor gp = g.sizes() == p.sizes() ? g : g.view(p.sizes());  // a flat shard of a whole parameter
    const torch::Tensor grad = grad_scale == 1.0 ? gp : gp * grad_scale;
    // Biases, LayerNorm and other 1-D parameters are not decayed (GPT-2 / nanoGPT).
    if (config_.weight_decay != 0 && whole.dim() >= 2) p.mul_(1 - lr * config_.weight_decay);
    exp_avg_[i].mul_(b1).add_(grad, 1 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(grad, grad, 1 - b2);
    auto denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias_correction2)).add_(config_.eps);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
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
