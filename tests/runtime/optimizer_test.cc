// Our AdamW against libtorch's torch::optim::AdamW, the learning-rate schedule and the
// gradient-norm helpers by hand, and the state round trip a checkpoint relies on.
#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "harp/runtime/exec/optimizer.h"

namespace harp::runtime {
namespace {

class SingleThread : public ::testing::Environment {
  void SetUp() override { torch::set_num_threads(1); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SingleThread);

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

OptimConfig test_config() {
  OptimConfig c;
  c.lr = 1e-2;
  c.min_lr = 1e-3;
  c.warmup_steps = 2;
  c.decay_steps = 8;
  c.weight_decay = 0.1;
  c.grad_clip = 0;
  return c;
}

Named make_params(std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  return {{"w", torch::randn({3, 4}, gen, opts).requires_grad_(true)},
          {"b", torch::randn({5}, gen, opts).requires_grad_(true)},
          {"e", torch::randn({2, 3, 2}, gen, opts).requires_grad_(true)}};
}

void set_grads(const Named& params, const at::Generator& gen) {
  for (const auto& [name, p] : params) p.mutable_grad() = torch::randn(p.sizes(), gen, p.options());
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(RuntimeOptimizer, MatchesTorchAdamWPerParameter) {
  const OptimConfig c = test_config();
  auto ours_params = make_params(1);
  AdamW ours(ours_params, c);
  // torch decays every parameter it is given, so one optimizer per parameter with the
  // decay our rule gives it (2+ dimensions only).
  std::vector<torch::Tensor> theirs_params;
  std::vector<std::unique_ptr<torch::optim::AdamW>> theirs;
  for (const auto& [name, p] : ours_params) {
    theirs_params.push_back(p.detach().clone().requires_grad_(true));
    auto o = torch::optim::AdamWOptions(c.lr)
                 .betas({c.beta1, c.beta2})
                 .eps(c.eps)
                 .weight_decay(p.dim() >= 2 ? c.weight_decay : 0.0);
    theirs.push_back(std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{theirs_params.back()}, o));
  }
  auto gen = at::detail::createCPUGenerator(2);
  for (int step = 0; step < 12; ++step) {
    set_grads(ours_params, gen);
    for (size_t i = 0; i < theirs.size(); ++i) {
      theirs_params[i].mutable_grad() = ours_params[i].second.grad().clone();
      auto& group = theirs[i]->param_groups()[0];
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr_at(c, step));
      theirs[i]->step();
    }
    ours.step(step, 1.0);
    for (size_t i = 0; i < theirs.size(); ++i)
      ASSERT_LE(max_diff(ours_params[i].second, theirs_params[i]), 1e-12)
          << ours_params[i].first << " at step " << step;
  }
  EXPECT_EQ(ours.steps_taken(), 12);
}

TEST(RuntimeOptimizer, GradScaleEqualsScaledGradients) {
  auto a = make_params(3), b = make_params(3);
  AdamW oa(a, test_config()), ob(b, test_config());
  auto gen = at::detail::createCPUGenerator(4);
  for (int step = 0; step < 3; ++step) {
    set_grads(a, gen);
    for (size_t i = 0; i < a.size(); ++i) b[i].second.mutable_grad() = a[i].second.grad() * 0.25;
    oa.step(step, 0.25);
    ob.step(step, 1.0);
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second));
}

TEST(RuntimeOptimizer, LearningRateScheduleByHand) {
  OptimConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 4;
  c.decay_steps = 14;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(c, 1), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(c, 3), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 4), 1.0);  // cosine starts at the peak
  EXPECT_NEAR(lr_at(c, 9), 0.55, 1e-15);  // halfway: min + (lr - min) / 2
  EXPECT_NEAR(lr_at(c, 13), 0.1 + 0.45 * (1 + std::cos(0.9 * std::acos(-1.0))), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(c, 14), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 1000), 0.1);
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.0);
}

TEST(RuntimeOptimizer, GradSquaredNormAndClipScaleByHand) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  Named params = {{"a", torch::zeros({2, 2}, opts).requires_grad_(true)},
                  {"b", torch::zeros({2}, opts).requires_grad_(true)},
                  {"c", torch::zeros({3}, opts).requires_grad_(true)}};
  params[0].second.mutable_grad() = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({2, 2});
  params[1].second.mutable_grad() = torch::tensor({2.0f, 2.0f});
  // "c" has no gradient: it contributes nothing.
  OptimConfig c;
  c.grad_clip = 1.0;
  AdamW adamw(params, c);
  EXPECT_DOUBLE_EQ(adamw.grad_squared_norm({true, true, true}).item<double>(), 38.0);
  EXPECT_DOUBLE_EQ(adamw.grad_squared_norm({true, false, true}).item<double>(), 30.0);
  EXPECT_DOUBLE_EQ(adamw.grad_squared_norm({false, true, false}).item<double>(), 8.0);
  EXPECT_EQ(adamw.clip_scale(0.5), 1.0);
  EXPECT_EQ(adamw.clip_scale(1.0), 1.0 / (1.0 + 1e-6));
  EXPECT_DOUBLE_EQ(adamw.clip_scale(4.0), 1.0 / (4.0 + 1e-6));
  c.grad_clip = 0;
  EXPECT_EQ(AdamW(params, c).clip_scale(1e9), 1.0);

  adamw.zero_grad();
  EXPECT_DOUBLE_EQ(adamw.grad_squared_norm({true, true, true}).item<double>(), 0.0);
  EXPECT_TRUE(params[0].second.grad().defined());
}

TEST(RuntimeOptimizer, StateRoundTripResumesBitwise) {
  auto a = make_params(5);
  AdamW oa(a, test_config());
  auto gen = at::detail::createCPUGenerator(6);
  for (int step = 0; step < 3; ++step) {
    set_grads(a, gen);
    oa.step(step, 1.0);
  }
  const auto state = oa.state();
  ASSERT_EQ(state.size(), 2 * a.size());
  EXPECT_EQ(state[0].first, "w.exp_avg");
  EXPECT_EQ(state[1].first, "w.exp_avg_sq");
  EXPECT_EQ(state[5].first, "e.exp_avg_sq");

  // A fresh optimizer over copies of the parameters, loaded from a copy of the state.
  Named b;
  for (const auto& [name, p] : a) b.emplace_back(name, p.detach().clone().requires_grad_(true));
  AdamW ob(b, test_config());
  Named saved;
  for (const auto& [name, t] : state) saved.emplace_back(name, t.clone());
  std::string error;
  ASSERT_TRUE(ob.load_state(saved, oa.steps_taken(), &error)) << error;
  EXPECT_EQ(ob.steps_taken(), 3);
  for (int step = 3; step < 6; ++step) {
    set_grads(a, gen);
    for (size_t i = 0; i < a.size(); ++i) b[i].second.mutable_grad() = a[i].second.grad().clone();
    oa.step(step, 1.0);
    ob.step(step, 1.0);
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
}

TEST(RuntimeOptimizer, LoadStateRejectsMismatchesAndChangesNothing) {
  auto params = make_params(7);
  AdamW adamw(params, test_config());
  auto good = adamw.state();
  std::string error;

  auto renamed = good;
  renamed[2].first = "x.exp_avg";
  EXPECT_FALSE(adamw.load_state(renamed, 1, &error));
  EXPECT_NE(error.find("x.exp_avg"), std::string::npos) << error;

  auto reshaped = good;
  reshaped[3].second = torch::ones({7}, torch::kFloat64);
  reshaped[0].second = torch::ones({3, 4}, torch::kFloat64);  // valid, must not be applied
  EXPECT_FALSE(adamw.load_state(reshaped, 1, &error));
  EXPECT_NE(error.find("b.exp_avg_sq"), std::string::npos) << error;
  EXPECT_EQ(adamw.state()[0].second.abs().sum().item<double>(), 0.0);

  auto shorter = good;
  shorter.pop_back();
  EXPECT_FALSE(adamw.load_state(shorter, 1, &error));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(adamw.steps_taken(), 0);
}

}  // namespace
}  // namespace harp::runtime
