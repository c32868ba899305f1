// bf16 mixed precision (runtime/precision.h): float32 master weights and AdamW state,
// the forward under bf16 autocast, bf16 tensors across cuts. A pipelined bf16 run
// against a bf16 single-process run (testing::train_reference under the same autocast),
// and both against float32; the checkpoint holds the float32 master weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "harp/runtime/io/checkpoint.h"
#include "rank_threads.h"
#include "reference/single_process_trainer.h"
#include "testutil/tiny_gpt.h"

namespace harp::testing {
namespace {

using plan::ScheduleKind;

runtime::OptimConfig optim() {
  runtime::OptimConfig o;
  o.lr = 1e-3;
  o.warmup_steps = 2;
  o.decay_steps = 10;
  return o;
}

// The largest |a - b| over same-named tensors, relative to the largest |b|.
double relative_difference(const std::vector<std::pair<std::string, torch::Tensor>>& a,
                           const std::vector<std::pair<std::string, torch::Tensor>>& b) {
  std::map<std::string, torch::Tensor> by_name(a.begin(), a.end());
  double diff = 0, scale = 0;
  for (const auto& [name, t] : b) {
    const torch::Tensor other = by_name.at(name).to(torch::kFloat64), want = t.to(torch::kFloat64);
    diff = std::max(diff, (other - want).abs().max().item().toDouble());
    scale = std::max(scale, want.abs().max().item().toDouble());
  }
  return diff / scale;
}

class Bfloat16 : public ::testing::TestWithParam<std::string> {};

// Tolerances, from the measured differences (printed): bf16 keeps 8 bits of mantissa
// (relative rounding 2^-9 = 0.2%). One stage does what the single process does, up to
// float32 summation order; across cuts the pipeline rounds the float32 residual stream
// to bf16 where the single process keeps it.
TEST_P(Bfloat16, PipelinedRunMatchesOneProcessInBf16) {
  torch::set_num_threads(1);
  const std::string family = GetParam();
  const model::ModelSpec m = tiny_model(family, 4, /*tied=*/family == "gpt", /*blocks=*/3);
  auto data = runtime::synthetic_tokens(9, 1 << 14, m.gpt.vocab);
  const int steps = 3, B = 4, mbs = 2;
  runtime::ExecConfig cfg;
  cfg.seed = 21;
  cfg.optim = optim();
  cfg.dtype = torch::kBFloat16;
  const ReferenceRun bf16 = train_reference(m, *data, cfg.seed, steps, B, mbs, cfg.optim, torch::kBFloat16);
  const ReferenceRun fp32 = train_reference(m, *data, cfg.seed, steps, B, mbs, cfg.optim, torch::kFloat32);
  struct Layout {
    const char* name;
    std::vector<int> cuts, dp;
    double loss_tol, grad_tol;
    std::vector<int> tp = {};
  };
  // Under tp the partial products are rounded to bf16 before their sum (as with NCCL's
  // bf16 all-reduce): the tolerances of a pipeline.
  const Layout layouts[] = {
      {"1 stage", {}, {1}, 1e-6, 1e-5},
      {"3 stages, cuts inside blocks, dp 1|2|1", {2, 7}, {1, 2, 1}, 2e-3, 3e-2},
      {"tp 2 | 1, dp 1 | 2", {7}, {1, 2}, 2e-3, 3e-2, {2, 1}},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(family + " " + l.name);
    const plan::Plan p = make_plan(m, l.cuts, l.dp, B, mbs, ScheduleKind::kHarp1F1B, {}, l.tp);
    const RankRun got = run_plan_threads(m, p, *data, steps, cfg);
    ASSERT_EQ(got.losses.size(), bf16.losses.size());
    double loss_diff = 0;
    for (int s = 0; s < steps; ++s) {
      loss_diff = std::max(loss_diff, std::abs(got.losses[s] - bf16.losses[s]) / bf16.losses[s]);
      // bf16 against float32: the same training, within bf16's precision.
      EXPECT_NEAR(bf16.losses[s], fp32.losses[s], 1e-2 * fp32.losses[s]) << "step " << s;
    }
    const double grad_diff = relative_difference(got.grads, bf16.grads);
    const double param_diff = relative_difference(got.params, bf16.params);
    std::printf("%s %s: losses within %.2e, gradients %.2e, parameters %.2e (relative) of one bf16 process\n",
                family.c_str(), l.name, loss_diff, grad_diff, param_diff);
    EXPECT_LE(loss_diff, l.loss_tol);
    EXPECT_LE(grad_diff, l.grad_tol);
    EXPECT_LE(param_diff, l.grad_tol);
    // The master weights and their gradients stay float32.
    for (const auto& [name, t] : got.params) EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
    for (const auto& [name, t] : got.grads) EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Bfloat16, ::testing::Values("gpt", "llama"));

TEST(Bfloat16Checkpoint, HoldsTheFloat32MasterWeightsAndResumesBitForBit) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny_gpt(2, /*tied=*/true, /*blocks=*/2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const plan::Plan p = make_plan(m, {3}, {1, 1}, 3, 2, ScheduleKind::k1F1B);
  const std::string root = std::string(HARP_BINARY_DIR) + "/bf16_checkpoint_test";
  std::filesystem::remove_all(root);
  runtime::TrainOptions o;
  o.exec.optim = optim();
  o.exec.dtype = torch::kBFloat16;
  o.progress = false;
  o.steps = 4;
  o.checkpoint_every = 2;
  o.out_dir = root + "/straight";
  const runtime::TrainSummary straight = train_threads(m, p, *data, o);
  ASSERT_EQ(straight.losses.size(), 4u);
  long long optimizer_steps = 0;
  auto saved = runtime::read_checkpoint(o.out_dir + "/checkpoints", 2, &optimizer_steps);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  ASSERT_FALSE(saved->empty());
  for (const auto& [name, t] : *saved) {
    if (t.is_floating_point()) {
      EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
    }
  }
  o.out_dir = root + "/stopped";
  o.steps = 2;
  train_threads(m, p, *data, o);
  o.steps = 4;
  o.resume = true;
  const runtime::TrainSummary resumed = train_threads(m, p, *data, o);
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], straight.losses[2]);
  EXPECT_EQ(resumed.losses[1], straight.losses[3]);
}

}  // namespace
}  // namespace harp::testing
