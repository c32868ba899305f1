// Sharded optimizer state (runtime/exec/zero.h): a pipelined plan with ZeRO-1 on one
// stage and ZeRO-2 on another trains with one process's losses, gradient norms and
// parameters (testing::train_reference); bf16 against the unsharded bf16 run; and
// checkpoints hold whole tensors, so a sharded run resumes unsharded on another cut and
// dp, and back.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "harp/runtime/exec/zero.h"
#include "rank_threads.h"
#include "reference/single_process_trainer.h"

namespace harp::testing {
namespace {

using plan::ScheduleKind;

// The flat vector's chunks: replica d owns elements [d c, (d + 1) c) of the reduced
// parameters laid end to end (c = ceil(n / dp)), the last chunk padded; a parameter the
// group does not reduce is every replica's whole.
TEST(ZeroShards, ChunksCoverTheReducedParametersOnceWithPadding) {
  const std::vector<torch::Tensor> params = {torch::zeros({5}), torch::zeros({3}), torch::zeros({2, 2})};
  const std::vector<bool> reduced = {true, false, true};
  using R = runtime::AdamW::Range;
  const std::vector<std::vector<R>> want = {
      {R{0, 3}, R{0, 3}, R{0, 0}}, {R{3, 5}, R{0, 3}, R{0, 1}}, {R{5, 5}, R{0, 3}, R{1, 4}}};
  for (int d = 0; d < 3; ++d) {
    runtime::ZeroShards z(2, 3, d, params, reduced);
    EXPECT_EQ(z.flat_numel(), 9);
    EXPECT_EQ(z.chunk_numel(), 3);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(z.owned()[i].begin, want[d][i].begin) << "replica " << d << " parameter " << i;
      EXPECT_EQ(z.owned()[i].end, want[d][i].end) << "replica " << d << " parameter " << i;
    }
  }
  runtime::ZeroShards padded(1, 4, 3, params, reduced);  // 9 elements in 4 chunks of 3: the last is padding
  EXPECT_EQ(padded.chunk_numel(), 3);
  EXPECT_EQ(padded.owned()[2].end - padded.owned()[2].begin, 0);
}

struct Case {
  std::string name;
  std::string family;
  std::vector<int> cuts, dp, zero, tp;
  torch::Dtype dtype;
};

plan::Plan zero_plan(const model::ModelSpec& m, const Case& c) {
  plan::Plan p = make_plan(m, c.cuts, c.dp, 2, 6, ScheduleKind::k1F1B, {}, c.tp);
  for (size_t s = 0; s < c.zero.size(); ++s) p.stages[s].zero = c.zero[s];
  return p;
}

void check_against_one_process(const Case& c) {
  SCOPED_TRACE(c.name);
  torch::set_num_threads(1);
  const model::ModelSpec m = three_block_model(1, c.family);  // embed, 3 blocks, head
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  const runtime::ExecConfig cfg = equivalence_config(c.dtype);
  const int steps = 3;
  const RankRun got = run_plan_threads(m, zero_plan(m, c), *data, steps, cfg);
  const ReferenceRun want = train_reference(m, *data, cfg.seed, steps, 2, 6, cfg.optim, c.dtype);
  const double rtol = c.dtype == torch::kFloat64 ? 1e-10 : 1e-5, atol = c.dtype == torch::kFloat64 ? 1e-10 : 4e-5;
  ASSERT_EQ(got.losses.size(), want.losses.size());
  ASSERT_EQ(got.grad_norms.size(), want.grad_norms.size());
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], atol + rtol * want.losses[s]) << "step " << s;
    EXPECT_NEAR(got.grad_norms[s], want.grad_norms[s], atol + rtol * want.grad_norms[s]) << "step " << s;
  }
  std::map<std::string, torch::Tensor> params(got.params.begin(), got.params.end());
  ASSERT_EQ(params.size(), want.params.size());
  for (const auto& [name, w] : want.params) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_TRUE(torch::allclose(params[name], w, rtol, atol))
        << name << ": max |diff| " << (params[name] - w).abs().max().item<double>();
  }
}

// dp 2 with ZeRO-1 on the first stage (the tied token embedding stays whole there), dp 3
// with ZeRO-2 on the last (its flat vector does not divide by 3: padded).
TEST(Zero, ShardedStagesTrainAsOneProcessInFloat64) {
  check_against_one_process({"gpt", "gpt", {1, 3}, {2, 1, 3}, {1, 0, 2}, {}, torch::kFloat64});
  check_against_one_process({"llama", "llama", {1, 3}, {2, 1, 3}, {2, 0, 1}, {}, torch::kFloat64});
}

// The in-memory transport's reduce-scatter and all-gather (all-reduces of zero-padded
// vectors, transport.h) give the same losses as one process too.
TEST(Zero, TheInMemoryTransportShardsAlike) {
  torch::set_num_threads(1);
  const Case c{"in memory", "gpt", {1, 3}, {2, 1, 3}, {1, 0, 2}, {}, torch::kFloat64};
  const model::ModelSpec m = three_block_model(1, c.family);
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  const runtime::ExecConfig cfg = equivalence_config(c.dtype);
  RankRun got;
  const std::vector<std::string> errors =
      run_plan_in_memory(m, zero_plan(m, c), *data, 3, cfg, {}, std::chrono::milliseconds(60000), &got);
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const ReferenceRun want = train_reference(m, *data, cfg.seed, 3, 2, 6, cfg.optim, c.dtype);
  ASSERT_EQ(got.losses.size(), 3u);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(got.losses[s], want.losses[s], 1e-10 * want.losses[s]) << "step " << s;
}

TEST(Zero, ShardedStagesTrainAsOneProcessInFloat32WithTensorParallelism) {
  check_against_one_process({"gpt fp32", "gpt", {1, 3}, {2, 1, 3}, {1, 0, 2}, {}, torch::kFloat32});
  check_against_one_process({"gpt tp 2 x dp 2", "gpt", {2}, {2, 3}, {2, 1}, {2, 1}, torch::kFloat32});
}

// bf16 autocast with float32 master weights: the sharded run against the unsharded one
// (they differ only in the order of float32 sums: the reduce-scatter's and the norm's).
TEST(Zero, Bf16MatchesTheUnshardedBf16Run) {
  torch::set_num_threads(1);
  const model::ModelSpec m = three_block_model(1, "gpt");
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  const runtime::ExecConfig cfg = equivalence_config(torch::kBFloat16);
  const Case sharded{"bf16", "gpt", {1, 3}, {2, 1, 3}, {1, 0, 2}, {}, torch::kBFloat16};
  Case whole = sharded;
  whole.zero = {0, 0, 0};
  const RankRun a = run_plan_threads(m, zero_plan(m, sharded), *data, 3, cfg);
  const RankRun b = run_plan_threads(m, zero_plan(m, whole), *data, 3, cfg);
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_EQ(b.losses.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(a.losses[s], b.losses[s], 1e-3 * b.losses[s]) << "step " << s;
    EXPECT_NEAR(a.grad_norms[s], b.grad_norms[s], 1e-2 * b.grad_norms[s]) << "step " << s;
  }
  std::map<std::string, torch::Tensor> pa(a.params.begin(), a.params.end());
  for (const auto& [name, w] : b.params)
    EXPECT_TRUE(torch::allclose(pa.at(name), w, 1e-3, 1e-4))
        << name << ": max |diff| " << (pa.at(name) - w).abs().max().item<double>();
}

runtime::TrainOptions zero_options(const std::string& out_dir, int steps, int checkpoint_every) {
  runtime::TrainOptions o;
  o.exec.optim = equivalence_optim();
  o.exec.dtype = torch::kFloat64;
  o.progress = false;
  o.steps = steps;
  o.checkpoint_every = checkpoint_every;
  o.out_dir = out_dir;
  return o;
}

// Trains `plan` 4 steps straight, and 2 steps then a checkpoint; returns the straight
// run's losses.
std::vector<double> straight_and_stopped(const model::ModelSpec& m, const plan::Plan& plan,
                                         const runtime::TokenSource& data, const std::string& dir) {
  runtime::TrainOptions o = zero_options(dir + "/straight", 4, 0);
  const std::vector<double> straight = train_threads(m, plan, data, o).losses;
  o = zero_options(dir + "/stopped", 2, 2);
  EXPECT_EQ(train_threads(m, plan, data, o).losses.size(), 2u);
  return straight;
}

// Resumes `dir`/stopped on `plan` to step 4; returns the two losses.
std::vector<double> resumed(const model::ModelSpec& m, const plan::Plan& plan, const runtime::TokenSource& data,
                            const std::string& dir, const std::string& name) {
  runtime::TrainOptions o = zero_options(dir + "/" + name, 4, 0);
  std::filesystem::copy(dir + "/stopped", o.out_dir, std::filesystem::copy_options::recursive);
  o.resume = true;
  const runtime::TrainSummary s = train_threads(m, plan, data, o);
  EXPECT_EQ(s.first_step, 2);
  return s.losses;
}

TEST(Zero, CheckpointsResumeAcrossZeroDpAndCuts) {
  torch::set_num_threads(1);
  const model::ModelSpec m = three_block_model(1, "gpt");
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/zero_resume_test";
  std::filesystem::remove_all(root);
  const plan::Plan sharded = zero_plan(m, {"", "gpt", {1, 3}, {1, 1, 3}, {0, 0, 2}, {}, torch::kFloat64});
  const plan::Plan whole = zero_plan(m, {"", "gpt", {2}, {2, 2}, {0, 0}, {}, torch::kFloat64});
  for (const auto& [from, to, name] : {std::make_tuple(&sharded, &whole, "zero2_dp3_to_zero0_dp2"),
                                       std::make_tuple(&whole, &sharded, "zero0_dp2_to_zero2_dp3")}) {
    SCOPED_TRACE(name);
    const std::string dir = root + "/" + name;
    const std::vector<double> straight = straight_and_stopped(m, *from, *data, dir);
    ASSERT_EQ(straight.size(), 4u);
    // On its own plan: bit for bit.
    const std::vector<double> same = resumed(m, *from, *data, dir, "same");
    ASSERT_EQ(same.size(), 2u);
    EXPECT_EQ(same[0], straight[2]);
    EXPECT_EQ(same[1], straight[3]);
    // On the other plan: float64 rounding of another order of sums.
    const std::vector<double> other = resumed(m, *to, *data, dir, "other");
    ASSERT_EQ(other.size(), 2u);
    for (int s = 0; s < 2; ++s) EXPECT_NEAR(other[s], straight[2 + s], 1e-10 * straight[2 + s]) << "step " << 2 + s;
  }
}

}  // namespace
}  // namespace harp::testing
