// The single-process oracle itself: it learns a repeating sequence, and it is invariant
// to how the global batch is split into microbatches (the loss-scaling bug class).
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "testutil/tiny_gpt.h"
#include <torch/torch.h>

#include "harp/model/model_spec.h"
#include "reference/single_process_trainer.h"

namespace harp::testing {
namespace {

class SingleThread : public ::testing::Environment {
  void SetUp() override { torch::set_num_threads(1); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SingleThread);

// A period-23 sequence over a vocabulary of 64: learnable from the context alone.
class RepeatingSource : public runtime::TokenSource {
 public:
  std::int64_t size() const override { return 4096; }
  std::uint32_t at(std::int64_t i) const override {
    return static_cast<std::uint16_t>((i % 23) * 29 % 64);
  }
  int vocab_limit() const override { return 64; }
};

using testing::tiny_gpt;

runtime::OptimConfig optim() {
  runtime::OptimConfig c;
  c.lr = 1e-2;
  c.min_lr = 1e-3;
  c.warmup_steps = 3;
  c.decay_steps = 20;
  c.weight_decay = 0.1;
  c.grad_clip = 1.0;
  return c;
}

double max_diff(const std::vector<std::pair<std::string, torch::Tensor>>& a,
                const std::vector<std::pair<std::string, torch::Tensor>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
  }
  return worst;
}

TEST(ReferenceTrainer, LossDecreasesOnRepeatingText) {
  RepeatingSource data;
  auto run = train_reference(tiny_gpt(2), data, 1, 20, 2, 4, optim(), torch::kFloat32);
  ASSERT_EQ(run.losses.size(), 20u);
  EXPECT_NEAR(run.losses.front(), std::log(64.0), 0.3);
  EXPECT_LT(run.losses.back(), 0.5 * run.losses.front())
      << "first " << run.losses.front() << ", last " << run.losses.back();
  // The tied pair received the same gradient and the same updates.
  using Named = std::vector<std::pair<std::string, torch::Tensor>>;
  auto find = [&](const Named& v, const std::string& n) {
    for (const auto& [name, t] : v)
      if (name == n) return t;
    ADD_FAILURE() << n << " missing";
    return torch::Tensor();
  };
  for (const Named* v : {&run.grads, &run.params})
    EXPECT_TRUE(torch::equal(find(*v, "embed.token.weight"), find(*v, "head.lm.weight")));
}

TEST(ReferenceTrainer, MicrobatchSplitDoesNotChangeTheResult) {
  RepeatingSource data;
  auto opt = optim();
  opt.grad_clip = 0.5;  // make clipping take part
  const auto spec = tiny_gpt(1);
  auto one = train_reference(spec, data, 4, 3, 1, 8, opt, torch::kFloat64);
  for (auto [microbatches, size] : {std::pair{2, 4}, std::pair{8, 1}}) {
    auto other = train_reference(spec, data, 4, 3, microbatches, size, opt, torch::kFloat64);
    ASSERT_EQ(other.losses.size(), one.losses.size());
    for (size_t s = 0; s < one.losses.size(); ++s)
      EXPECT_NEAR(other.losses[s], one.losses[s], 1e-12)
          << microbatches << "x" << size << " step " << s;
    EXPECT_LE(max_diff(other.grads, one.grads), 1e-12) << microbatches << "x" << size;
    EXPECT_LE(max_diff(other.params, one.params), 1e-12) << microbatches << "x" << size;
  }
  // Same weights at every granularity, so a k = 4 model trains identically too.
  auto fine = train_reference(tiny_gpt(4), data, 4, 3, 2, 4, opt, torch::kFloat64);
  EXPECT_LE(max_diff(fine.params, one.params), 1e-12);
}

}  // namespace
}  // namespace harp::testing
