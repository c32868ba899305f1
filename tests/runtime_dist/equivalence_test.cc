// The core runtime test (STYLE habit 15): any plan — stages, dp, schedule, microbatch
// count — gives the same losses, gradients and parameters as one process doing gradient
// accumulation over the same microbatches (testing::train_reference). Float32 within
// rtol 1e-5 / atol 4e-5; float64 within 1e-10. Also: the same global batch split into
// different microbatch counts gives the same update. Resuming: resume_test.cc.
#include <gtest/gtest.h>

#include "testutil/tiny_gpt.h"

#include <filesystem>
#include <map>

#include "testutil/status.h"
#include "rank_threads.h"
#include "reference/single_process_trainer.h"

namespace harp::testing {
namespace {

model::ModelSpec tiny(int k, const std::string& family = "gpt", int vocab = 64) {
  return three_block_model(k, family, vocab);
}
runtime::OptimConfig optim() { return equivalence_optim(); }

void expect_close(const std::vector<std::pair<std::string, torch::Tensor>>& got,
                  const std::vector<std::pair<std::string, torch::Tensor>>& want, double rtol, double atol,
                  const std::string& what) {
  std::map<std::string, torch::Tensor> g(got.begin(), got.end());
  ASSERT_EQ(g.size(), want.size()) << what << ": every parameter once";
  for (const auto& [name, w] : want) {
    auto it = g.find(name);
    ASSERT_NE(it, g.end()) << what << ": missing " << name;
    EXPECT_TRUE(torch::allclose(it->second, w, rtol, atol))
        << what << " " << name << ": max |diff| " << (it->second - w).abs().max().item<double>();
  }
}

struct Case {
  std::string name;
  int k;
  std::vector<int> cuts, dp;
  int microbatches, microbatch_size;
  plan::ScheduleKind kind;
  std::vector<int> launch_counts = {};
  torch::Dtype dtype = torch::kFloat32;
  std::string family = "gpt";
  std::vector<int> tp = {};  // per stage; empty: 1
  int vocab = 64;
  std::vector<std::vector<int>> shares = {};  // per stage (plan::Stage::shares); empty: even
};

void check(const Case& c) {
  SCOPED_TRACE(c.name);
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(c.k, c.family, c.vocab);
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  const runtime::ExecConfig cfg = equivalence_config(c.dtype);
  const int steps = 3;
  plan::Plan p = make_plan(m, c.cuts, c.dp, c.microbatches, c.microbatch_size, c.kind, c.launch_counts, c.tp);
  for (size_t i = 0; i < c.shares.size(); ++i) p.stages[i].shares = c.shares[i];
  RankRun got = run_plan_threads(m, p, *data, steps, cfg);
  ReferenceRun want = train_reference(m, *data, cfg.seed, steps, c.microbatches, c.microbatch_size, cfg.optim, c.dtype);
  const double rtol = c.dtype == torch::kFloat64 ? 1e-10 : 1e-5, atol = c.dtype == torch::kFloat64 ? 1e-10 : 4e-5;
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (int s = 0; s < steps; ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], atol + rtol * std::abs(want.losses[s])) << "step " << s;
  expect_close(got.grads, want.grads, rtol, atol, "gradient");
  expect_close(got.params, want.params, rtol, atol, "parameter");
}

using plan::ScheduleKind;

TEST(Equivalence, OneStageIsTheReference) {
  check({"1 stage", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}});
}

TEST(Equivalence, Schedules) {
  // k = 1: layers embed, 3 blocks, head (L = 5); uneven cuts.
  check({"gpipe 3 stages", 1, {2, 3}, {1, 1, 1}, 4, 2, ScheduleKind::kGpipe, {}});
  check({"1f1b 3 stages", 1, {1, 4}, {1, 1, 1}, 4, 2, ScheduleKind::k1F1B, {}});
  check({"harp [4,2,1]", 1, {2, 4}, {1, 1, 1}, 4, 2, ScheduleKind::kHarp1F1B, {4, 2, 1}});
  check({"harp [3,3,1]", 1, {1, 3}, {1, 1, 1}, 5, 1, ScheduleKind::kHarp1F1B, {3, 3, 1}});
  check({"harp [2,1] one microbatch", 1, {3}, {1, 1}, 1, 2, ScheduleKind::kHarp1F1B, {1, 1}});
}

TEST(Equivalence, FinerGranularityCutsInsideBlocks) {
  // k = 2: L = 8 (embed, attn/mlp x 3, head); cuts between attention and MLP.
  check({"k2 1f1b", 2, {2, 5}, {1, 1, 1}, 3, 2, ScheduleKind::k1F1B, {}});
  check({"k2 harp", 2, {1, 4, 7}, {1, 1, 1, 1}, 4, 1, ScheduleKind::kHarp1F1B, {4, 4, 2, 1}});
}

TEST(Equivalence, DataParallelStages) {
  check({"dp 2 | 1", 1, {2}, {2, 1}, 3, 2, ScheduleKind::k1F1B, {}});
  check({"dp 1 | 2 harp", 2, {3}, {1, 2}, 4, 4, ScheduleKind::kHarp1F1B, {3, 1}});
  check({"dp 2 single stage", 1, {}, {2}, 2, 2, ScheduleKind::k1F1B, {}});
  check({"dp 2 | 2 | 1", 1, {1, 3}, {2, 2, 1}, 2, 2, ScheduleKind::kGpipe, {}});
}

// Uneven data-parallel shares (replicas of different device types: plan::Stage::shares):
// replica d of a stage takes its own count of every microbatch's samples, the cut tensors
// are split and joined by share, and the loss (a sum over the global batch's tokens) makes
// the gradients add up without weights. A middle stage at 3:1 and at 2:1:1, under
// harp-1f1b and gpipe, in float64 and float32; the data stage and the loss stage uneven
// too; tp inside the uneven stage; a split backward.
TEST(Equivalence, UnevenDataParallelShares) {
  const auto f64 = torch::kFloat64, f32 = torch::kFloat32;
  const std::vector<int> none;
  for (auto [kind, counts] : {std::make_pair(ScheduleKind::kHarp1F1B, std::vector<int>{3, 2, 1}),
                              std::make_pair(ScheduleKind::kGpipe, std::vector<int>{})}) {
    const std::string name = plan::schedule_kind_name(kind);
    for (auto dtype : {f64, f32}) {
      const std::string type = dtype == f64 ? " float64" : " float32";
      check({name + " 1 | 3:1 | 1" + type, 1, {1, 3}, {1, 2, 1}, 4, 4, kind, counts, dtype, "gpt", {}, 64,
             {none, {3, 1}, none}});
      check({name + " 1 | 2:1:1 | 1" + type, 1, {1, 3}, {1, 3, 1}, 4, 4, kind, counts, dtype, "gpt", {}, 64,
             {none, {2, 1, 1}, none}});
    }
  }
  check({"2:1:1 | 1:3 (data and loss stages uneven)", 2, {3}, {3, 2}, 3, 4, ScheduleKind::k1F1B, {}, f64, "gpt", {},
         64, {{2, 1, 1}, {1, 3}}});
  check({"1 | 3:1 with tp 2 | 1", 4, {2, 8}, {1, 2, 1}, 4, 4, ScheduleKind::kHarp1F1B, {3, 2, 1}, f64, "gpt",
         {1, 2, 1}, 63, {none, {3, 1}, none}});
  check({"harp-zb 1 | 1:2 | 1", 1, {1, 3}, {1, 2, 1}, 4, 3, ScheduleKind::kHarpZb, {3, 2, 1}, f64, "gpt", {}, 64,
         {none, {1, 2}, none}});
}

TEST(Equivalence, TinyLlama) {
  const auto f32 = torch::kFloat32;
  check({"llama 1 stage", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, f32, "llama"});
  check({"llama k2 harp", 2, {1, 4, 7}, {1, 1, 1, 1}, 4, 1, ScheduleKind::kHarp1F1B, {4, 4, 2, 1}, f32, "llama"});
  check({"llama dp 2 | 2 | 1 gpipe", 1, {1, 3}, {2, 2, 1}, 2, 2, ScheduleKind::kGpipe, {}, f32, "llama"});
  check({"llama float64 k4 dp", 4, {2, 8}, {1, 2, 1}, 4, 2, ScheduleKind::kHarp1F1B, {3, 2, 1}, torch::kFloat64,
         "llama"});
}

// The LLaMA lineage's parts all at once (Qwen2's q/k/v biases, Qwen3's q/k norm and a
// head size that is not hidden / heads, Mistral's sliding window, LLaMA 3.1's rope
// scaling; rank_threads.h): pipelines, data and tensor parallelism and a split backward
// give one process's run, as for LLaMA. (transformers_test holds each part to
// transformers itself.)
TEST(Equivalence, LlamaLineageParts) {
  const auto f32 = torch::kFloat32, f64 = torch::kFloat64;
  check({"lineage 1 stage", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, f32, "lineage"});
  check({"lineage k2 harp", 2, {1, 4, 7}, {1, 1, 1, 1}, 4, 1, ScheduleKind::kHarp1F1B, {4, 4, 2, 1}, f32, "lineage"});
  check({"lineage tp 2", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, f32, "lineage", {2}});
  check({"lineage k4 tp 2 | 1 dp 1 | 2", 4, {8}, {1, 2}, 4, 2, ScheduleKind::kGpipe, {}, f32, "lineage", {2, 1}});
  check({"lineage zb-h1 float64", 2, {1, 4}, {1, 1, 1}, 4, 1, ScheduleKind::kZbH1, {}, f64, "lineage"});
}

// Tensor parallelism (gpt.h): losses, gathered gradients and parameters after 3 steps
// equal one process's. k = 4 puts cuts after attn_in (stage 0 = embed + attn_in: its q,
// k, v are gathered from tp shards) and after mlp_in (the next stage splits the
// activation again); an odd vocabulary gives uneven vocabulary shards.
TEST(Equivalence, TensorParallel) {
  const auto f32 = torch::kFloat32;
  check({"tp 2", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, f32, "gpt", {2}});
  check({"tp 4 odd vocabulary", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, f32, "gpt", {4}, 63});
  check({"tp 2 x dp 2 x pp 2", 1, {2}, {2, 2}, 4, 2, ScheduleKind::k1F1B, {}, f32, "gpt", {2, 2}});
  check({"k4 tp 2 | 1 | 2, dp 1 | 2 | 1, cuts in blocks", 4, {2, 8}, {1, 2, 1}, 4, 2, ScheduleKind::kHarp1F1B,
         {3, 2, 1}, f32, "gpt", {2, 1, 2}, 63});
  check({"k4 tied tp 1 | 2 | 1", 4, {3, 10}, {1, 1, 1}, 3, 2, ScheduleKind::k1F1B, {}, f32, "gpt", {1, 2, 1}});
  check({"llama tp 2 (grouped-query)", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, f32, "llama", {2}});
  check({"llama k4 tp 2 | 1 dp 1 | 2", 4, {8}, {1, 2}, 4, 2, ScheduleKind::kGpipe, {}, f32, "llama", {2, 1}});
}

// Split backwards (zero-bubble schedules, schedule/zero_bubble.h): a stage's I runs its
// graph with the linear layers' weight products queued, its W runs them later
// (nn/weight_grad.h); the run is one process's. Three stages with dp on one and tp on
// another, in float64 (libtorch's products) and float32 (oneDNN's where the build has it).
TEST(Equivalence, SplitBackwardSchedules) {
  const auto f64 = torch::kFloat64, f32 = torch::kFloat32;
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kHarpZb}) {
    const std::string name = plan::schedule_kind_name(kind);
    check({name + " dp 1 | 2 | 1", 1, {1, 3}, {1, 2, 1}, 5, 2, kind, {4, 2, 1}, f64});
    check({name + " k4 tp 2 | 1 | 1, dp 1 | 2 | 1", 4, {2, 8}, {1, 2, 1}, 4, 2, kind, {3, 2, 1}, f64, "gpt",
           {2, 1, 1}, 63});
  }
  check({"harp-zb float32 tp", 4, {2, 8}, {1, 2, 1}, 4, 2, ScheduleKind::kHarpZb, {3, 2, 1}, f32, "gpt", {2, 1, 1}, 63});
  check({"zb-h1 llama float64", 2, {1, 4}, {1, 1, 1}, 4, 1, ScheduleKind::kZbH1, {}, f64, "llama"});
}

// A split backward keeps recomputation (a recomputed unit's layers queue their products
// during the I), ZeRO (the reductions follow the last W) and bf16 working: float64 against
// one process; bf16 against the same plan under harp-1f1b (they differ in the order of
// float32 sums only).
TEST(Equivalence, SplitBackwardWithRecomputationZeroAndBf16) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(1);
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  const int steps = 3;
  auto split_plan = [&](ScheduleKind kind) {
    plan::Plan p = make_plan(m, {1, 3}, {1, 2, 1}, 4, 2, kind, {4, 2, 1});
    p.stages[1].zero = 1;
    return p;
  };
  runtime::ExecConfig cfg = equivalence_config(torch::kFloat64);
  const ReferenceRun want = train_reference(m, *data, cfg.seed, steps, 4, 2, cfg.optim, torch::kFloat64);
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(recompute_name(mode));
    cfg.recompute = mode;
    const RankRun got = run_plan_threads(m, split_plan(ScheduleKind::kHarpZb), *data, steps, cfg);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (int s = 0; s < steps; ++s) EXPECT_NEAR(got.losses[s], want.losses[s], 1e-10 * want.losses[s]) << "step " << s;
    expect_close(got.params, want.params, 1e-10, 1e-10, "parameter");
  }
  const runtime::ExecConfig bf16 = equivalence_config(torch::kBFloat16);
  const RankRun split = run_plan_threads(m, split_plan(ScheduleKind::kHarpZb), *data, steps, bf16);
  const RankRun whole = run_plan_threads(m, split_plan(ScheduleKind::kHarp1F1B), *data, steps, bf16);
  ASSERT_EQ(split.losses.size(), whole.losses.size());
  for (int s = 0; s < steps; ++s) EXPECT_NEAR(split.losses[s], whole.losses[s], 1e-3 * whole.losses[s]) << "step " << s;
}

// Recomputation under tensor parallelism reruns the forward's all-reduces in the same
// order on every tp rank: gradients and parameters bit-identical to no recomputation.
TEST(Equivalence, TensorParallelRecomputationIsBitIdentical) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(4);
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  const plan::Plan p = make_plan(m, {6}, {1, 1}, 3, 2, ScheduleKind::k1F1B, {}, {2, 2});
  runtime::ExecConfig cfg;
  cfg.optim = optim();
  const RankRun none = run_plan_threads(m, p, *data, 2, cfg);
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    cfg.recompute = mode;
    const RankRun got = run_plan_threads(m, p, *data, 2, cfg);
    EXPECT_EQ(got.losses, none.losses) << recompute_name(mode);
    // Ranks report in any order: compare by name.
    for (const auto& [what, a, b] : {std::make_tuple("parameter", &got.params, &none.params),
                                     std::make_tuple("gradient", &got.grads, &none.grads)}) {
      const std::map<std::string, torch::Tensor> want(b->begin(), b->end());
      ASSERT_EQ(a->size(), want.size());
      for (const auto& [name, t] : *a)
        EXPECT_TRUE(torch::equal(t, want.at(name))) << recompute_name(mode) << " " << what << " " << name;
    }
  }
}

TEST(Equivalence, Float64IsTighter) {
  check({"float64 harp dp", 2, {2, 5}, {2, 1, 1}, 4, 2, ScheduleKind::kHarp1F1B, {4, 2, 1}, torch::kFloat64});
}

TEST(Equivalence, SameGlobalBatchAnyMicrobatchCount) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(1);
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  runtime::ExecConfig cfg;
  cfg.dtype = torch::kFloat64;
  cfg.optim = optim();
  RankRun a = run_plan_threads(m, make_plan(m, {2}, {1, 1}, 2, 4, ScheduleKind::k1F1B), *data, 2, cfg);
  RankRun b = run_plan_threads(m, make_plan(m, {2}, {1, 1}, 8, 1, ScheduleKind::k1F1B), *data, 2, cfg);
  RankRun c = run_plan_threads(m, make_plan(m, {2}, {2, 1}, 4, 2, ScheduleKind::kHarp1F1B, {3, 1}), *data, 2, cfg);
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_NEAR(a.losses[s], b.losses[s], 1e-12);
    EXPECT_NEAR(a.losses[s], c.losses[s], 1e-12);
  }
  expect_close(b.params, a.params, 1e-10, 1e-12, "2x4 vs 8x1");
  expect_close(c.params, a.params, 1e-10, 1e-12, "2x4 vs 4x2 dp");
}

// Validation: a pipelined plan with dp reports the validation losses of one process
// (float64, 1e-10), and evaluating does not change training by a bit.
TEST(Evaluation, PipelinedValidationLossEqualsOneProcess) {
  torch::set_num_threads(1);
  for (const std::string family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    const model::ModelSpec m = tiny(2, family);
    auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
    auto val = runtime::synthetic_tokens(8, 1 << 12, m.gpt.vocab);
    auto run = [&](const plan::Plan& p, bool eval, const std::string& name) {
      runtime::TrainOptions o;
      o.exec.optim = optim();
      o.exec.dtype = torch::kFloat64;
      o.progress = false;
      o.steps = 4;
      o.out_dir = std::string(HARP_BINARY_DIR) + "/evaluation_test/" + family + "_" + name;
      std::filesystem::remove_all(o.out_dir);
      if (eval) {
        o.val_data = val.get();
        o.eval_every = 2;
        o.eval_batches = 3;
      }
      return train_threads(m, p, *data, o);
    };
    const auto one = run(make_plan(m, {}, {1}, 4, 2, ScheduleKind::k1F1B), true, "one");
    const plan::Plan piped = make_plan(m, {2, 5}, {2, 1, 2}, 4, 2, ScheduleKind::kHarp1F1B, {3, 2, 1});
    const auto with = run(piped, true, "with"), without = run(piped, false, "without");
    ASSERT_EQ(one.val_losses.size(), 3u);  // before the first step, after steps 2 and 4
    ASSERT_EQ(with.val_losses.size(), 3u);
    EXPECT_EQ(with.val_losses[0].first, 0);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(with.val_losses[i].first, one.val_losses[i].first);
      EXPECT_NEAR(with.val_losses[i].second, one.val_losses[i].second, 1e-10);
    }
    EXPECT_NE(with.val_losses[1].second, with.val_losses[2].second);  // the weights moved
    EXPECT_EQ(with.losses, without.losses);
    EXPECT_TRUE(without.val_losses.empty());
  }
}

}  // namespace
}  // namespace harp::testing
