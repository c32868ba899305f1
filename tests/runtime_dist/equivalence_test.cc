// The core runtime test (STYLE habit 15): any plan — stages, dp, schedule, microbatch
// count — gives the same losses, gradients and parameters as one process doing gradient
// accumulation over the same microbatches (testing::train_reference). Float32 within
// rtol 1e-5 / atol 4e-5; float64 within 1e-10. Also: the same global batch split into
// different microbatch counts gives the same update, and a resumed run continues with
// exactly the losses of an uninterrupted one.
#include <gtest/gtest.h>

#include "testutil/tiny_gpt.h"

#include <cstring>
#include <filesystem>
#include <map>

#include "harp/common/document.h"
#include "harp/common/sha256.h"
#include "testutil/status.h"
#include "harp/runtime/checkpoint.h"
#include "rank_threads.h"
#include "reference/single_process_trainer.h"

namespace harp::testing {
namespace {

// Three blocks: enough layers for uneven 3- and 4-stage cuts. GPT tied, LLaMA untied
// with grouped-query attention.
model::ModelSpec tiny(int k, const std::string& family = "gpt", int vocab = 64) {
  return family == "llama" ? tiny_llama(k, /*tied=*/false, /*blocks=*/3, 32, 4, 16, vocab)
                           : tiny_gpt(k, /*tied=*/true, /*blocks=*/3, 32, 4, 16, vocab);
}

runtime::OptimConfig optim() {
  runtime::OptimConfig o;
  // AdamW turns a gradient's rounding noise into an update of up to lr where v is tiny,
  // so a float32 comparison needs a modest rate (1e-2 showed 5e-5 differences).
  o.lr = 1e-3;
  o.warmup_steps = 2;
  o.decay_steps = 10;
  o.grad_clip = 0.5;  // small enough that clipping happens: the global norm must be right
  return o;
}

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
};

void check(const Case& c) {
  SCOPED_TRACE(c.name);
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(c.k, c.family, c.vocab);
  auto data = runtime::synthetic_tokens(7, 1 << 14, m.gpt.vocab);
  runtime::ExecConfig cfg;
  cfg.seed = 11;
  cfg.dtype = c.dtype;
  cfg.optim = optim();
  const int steps = 3;
  plan::Plan p = make_plan(m, c.cuts, c.dp, c.microbatches, c.microbatch_size, c.kind, c.launch_counts, c.tp);
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

TEST(Equivalence, TinyLlama) {
  const auto f32 = torch::kFloat32;
  check({"llama 1 stage", 1, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, f32, "llama"});
  check({"llama k2 harp", 2, {1, 4, 7}, {1, 1, 1, 1}, 4, 1, ScheduleKind::kHarp1F1B, {4, 4, 2, 1}, f32, "llama"});
  check({"llama dp 2 | 2 | 1 gpipe", 1, {1, 3}, {2, 2, 1}, 2, 2, ScheduleKind::kGpipe, {}, f32, "llama"});
  check({"llama float64 k4 dp", 4, {2, 8}, {1, 2, 1}, 4, 2, ScheduleKind::kHarp1F1B, {3, 2, 1}, torch::kFloat64,
         "llama"});
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

// Training options of the resume tests: the shared optimizer, no progress lines,
// checkpoints every `checkpoint_every` steps in `out_dir`.
runtime::TrainOptions resume_options(const std::string& out_dir, int steps, int checkpoint_every) {
  runtime::TrainOptions o;
  o.exec.optim = optim();
  o.progress = false;
  o.steps = steps;
  o.checkpoint_every = checkpoint_every;
  o.out_dir = out_dir;
  return o;
}

TEST(Resume, ContinuesBitForBit) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  plan::Plan p = make_plan(m, {3, 6}, {1, 2, 1}, 3, 2, ScheduleKind::kHarp1F1B, {3, 2, 1});
  const std::string root = std::string(HARP_BINARY_DIR) + "/resume_test";
  std::filesystem::remove_all(root);
  runtime::TrainOptions o = resume_options(root + "/straight", 6, 3);
  runtime::TrainSummary straight = train_threads(m, p, *data, o);
  ASSERT_EQ(straight.losses.size(), 6u);
  o.out_dir = root + "/stopped";
  o.steps = 3;
  runtime::TrainSummary first = train_threads(m, p, *data, o);
  ASSERT_EQ(first.losses.size(), 3u);
  o.steps = 6;
  o.resume = true;  // new ranks, new communicators: only the checkpoint carries state
  runtime::TrainSummary second = train_threads(m, p, *data, o);
  EXPECT_EQ(second.first_step, 3);
  ASSERT_EQ(second.losses.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(first.losses[s], straight.losses[s]) << "step " << s;
    EXPECT_EQ(second.losses[s], straight.losses[3 + s]) << "step " << 3 + s << " after resume";
  }
}

// Checkpoints hold full tensors: a run saved with tp 2 resumes with tp 1 and the other
// way round, and continues with the losses of an uninterrupted run (float32 rounding:
// the tp sums add in another order).
TEST(Resume, AcrossTensorParallelDegrees) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(2, "gpt", 63);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/resume_tp_test";
  std::filesystem::remove_all(root);
  auto plan_with = [&](std::vector<int> tp) { return make_plan(m, {3}, {1, 2}, 2, 2, ScheduleKind::k1F1B, {}, tp); };
  runtime::TrainOptions o = resume_options(root + "/straight", 4, 2);
  const runtime::TrainSummary straight = train_threads(m, plan_with({1, 1}), *data, o);
  ASSERT_EQ(straight.losses.size(), 4u);
  for (const auto& [before, after] : {std::make_pair(std::vector<int>{2, 1}, std::vector<int>{1, 2}),
                                      std::make_pair(std::vector<int>{1, 1}, std::vector<int>{2, 2})}) {
    SCOPED_TRACE("tp " + Json(before).dump() + " then " + Json(after).dump());
    o.out_dir = root + "/" + std::to_string(before[0]) + std::to_string(before[1]);
    o.steps = 2;
    o.resume = false;
    const runtime::TrainSummary first = train_threads(m, plan_with(before), *data, o);
    o.steps = 4;
    o.resume = true;
    const runtime::TrainSummary second = train_threads(m, plan_with(after), *data, o);
    ASSERT_EQ(first.losses.size(), 2u);
    ASSERT_EQ(second.losses.size(), 2u);
    EXPECT_EQ(second.first_step, 2);
    for (int s = 0; s < 2; ++s) {
      EXPECT_NEAR(first.losses[s], straight.losses[s], 1e-5 * straight.losses[s]) << "step " << s;
      EXPECT_NEAR(second.losses[s], straight.losses[2 + s], 1e-5 * straight.losses[2 + s]) << "step " << 2 + s;
    }
  }
}

// Regression (hardening issue): resuming with another plan or world size was accepted
// without a word. The manifest's layout must match until resuming on another plan works.
TEST(Resume, AnotherLayoutIsRefusedWithTheDifference) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/resume_layout_test";
  std::filesystem::remove_all(root);
  runtime::TrainOptions o = resume_options(root, 2, 2);
  train_threads(m, make_plan(m, {3}, {1, 1}, 2, 2, ScheduleKind::k1F1B), *data, o);
  o.steps = 4;
  o.resume = true;
  auto errors = train_threads_errors(m, make_plan(m, {5}, {1, 1}, 2, 2, ScheduleKind::k1F1B), *data, o);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("the checkpoint was written with stages = [[0,3,1],[3,"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("resume with the plan's stages and dp it was made with"), std::string::npos) << errors[0];
  errors = train_threads_errors(m, make_plan(m, {3}, {2, 1}, 2, 2, ScheduleKind::k1F1B), *data, o);
  ASSERT_EQ(errors.size(), 3u);
  // The stages (dp 2 on stage 0).
  EXPECT_NE(errors[0].find("this run has [[0,3,2],[3,"), std::string::npos) << errors[0];
}

// Retention: after each checkpoint only the newest K complete ones are left (and an
// older incomplete folder goes too); the run resumes from the newest.
TEST(Resume, KeepsTheNewestCheckpoints) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(1);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/keep_test";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/checkpoints/step_000000");  // a stopped run's leftover
  runtime::TrainOptions o = resume_options(root, 5, 1);
  o.keep_checkpoints = 2;
  const plan::Plan p = make_plan(m, {2}, {1, 1}, 2, 2, ScheduleKind::k1F1B);
  train_threads(m, p, *data, o);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(root + "/checkpoints"))
    if (e.is_directory()) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step_000004", "step_000005"}));
  o.steps = 6;
  o.resume = true;
  EXPECT_EQ(train_threads(m, p, *data, o).first_step, 5);
}

// A tp degree that does not divide the heads is refused on every rank before any work.
TEST(Resume, TensorParallelismThatDoesNotSplitTheModelIsRefused) {
  const model::ModelSpec m = tiny(1);  // 4 heads
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/tp3_test";
  std::filesystem::remove_all(root);
  const auto errors =
      train_threads_errors(m, make_plan(m, {}, {1}, 2, 2, ScheduleKind::k1F1B, {}, {3}), *data, resume_options(root, 1, 0));
  ASSERT_EQ(errors.size(), 3u);
  for (const std::string& e : errors)
    EXPECT_NE(e.find("stage 0 has tp = 3, which must divide the model's heads (4)"), std::string::npos) << e;
}

// Regression (hardening issue): a tensor offset that wraps around passed the bounds check
// of a re-signed file and read out of bounds. Bounds are now checked without sums.
TEST(Resume, CraftedResignedCheckpointIsRefused) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/crafted_ckpt";
  std::filesystem::create_directories(dir);
  runtime::NamedTensors t = {{"w", torch::arange(10, torch::kFloat64)}};
  HARP_ASSERT_OK(runtime::write_tensor_file(dir + "/a.bin", t, 5));
  std::string text = read_text_file(dir + "/a.bin").value();
  text.resize(text.size() - 64);  // drop the digest
  for (const std::string& evil : {std::string("18446744073709551608"), std::string("9223372036854775807")}) {
    std::string crafted = text;
    const size_t at = crafted.find("\"offset\":0");
    ASSERT_NE(at, std::string::npos);
    // Same length header (a wrapped offset needs more digits: pad the length line).
    crafted.replace(at, std::strlen("\"offset\":0"), "\"offset\":" + evil);
    const size_t nl = crafted.find('\n', 10);
    const size_t hlen = std::stoul(crafted.substr(10, nl - 10)) + evil.size() - 1;
    crafted.replace(10, nl - 10, std::to_string(hlen));
    crafted += sha256_hex(crafted);  // re-signed, as an attacker would
    HARP_ASSERT_OK(write_text_file_atomic(dir + "/c.bin", crafted));
    auto r = runtime::read_tensor_file(dir + "/c.bin", nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("out of range"), std::string::npos) << r.status().message();
  }
}

TEST(Resume, CorruptCheckpointIsRefusedWithItsName) {
  const std::string dir = std::string(HARP_BINARY_DIR) + "/corrupt_ckpt";
  std::filesystem::create_directories(dir);
  runtime::NamedTensors t = {{"w", torch::arange(10, torch::kFloat64)}};
  ASSERT_TRUE(runtime::write_tensor_file(dir + "/a.bin", t, 5).ok());
  long long counter = 0;
  auto back = runtime::read_tensor_file(dir + "/a.bin", &counter);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(counter, 5);
  EXPECT_TRUE(torch::equal((*back)[0].second, t[0].second));
  auto text = read_text_file(dir + "/a.bin");
  std::string bad = *text;
  bad[bad.size() / 2] ^= 1;
  ASSERT_TRUE(write_text_file_atomic(dir + "/b.bin", bad).ok());
  auto r = runtime::read_tensor_file(dir + "/b.bin", &counter);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("b.bin"), std::string::npos);
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos);
}

}  // namespace
}  // namespace harp::testing
