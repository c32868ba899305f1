// Activation recomputation (common/recompute.h, executor.h): with each mode, on every
// stage or mixed per stage, a pipelined run's losses, gradients and parameters equal
// those of the same run without recomputation bit for bit (float32 and bf16, CPU); and the memory
// a step keeps shrinks as the cost model says it should: selective frees the attention
// probabilities, full keeps only each block's input.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "harp/runtime/exec/memory.h"
#include "rank_threads.h"
#include "testutil/tiny_gpt.h"

namespace harp::testing {
namespace {

using plan::ScheduleKind;

runtime::ExecConfig config() {
  runtime::ExecConfig cfg;
  cfg.seed = 5;
  cfg.optim.lr = 1e-2;
  cfg.optim.warmup_steps = 1;
  cfg.optim.decay_steps = 10;
  return cfg;
}

void expect_identical(const RankRun& got, const RankRun& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s) EXPECT_EQ(got.losses[s], want.losses[s]) << what << " step " << s;
  using Named = std::vector<std::pair<std::string, torch::Tensor>>;
  const std::pair<const Named*, const Named*> sets[] = {{&got.grads, &want.grads}, {&got.params, &want.params}};
  for (const auto& [got_set, want_set] : sets) {
    std::map<std::string, torch::Tensor> g(got_set->begin(), got_set->end());
    ASSERT_EQ(g.size(), want_set->size()) << what;
    for (const auto& [name, w] : *want_set) {
      ASSERT_TRUE(g.count(name)) << what << ": missing " << name;
      const torch::Tensor diff = (g[name] - w).abs().max();
      EXPECT_TRUE(torch::equal(g[name], w)) << what << " " << name << ": max |diff| " << diff.item().toDouble();
    }
  }
}

struct Layout {
  std::string name;
  int k;
  std::vector<int> cuts, dp;
  ScheduleKind kind;
};

class RecomputeBitIdentical : public ::testing::TestWithParam<std::string> {};

TEST_P(RecomputeBitIdentical, ForEveryModeAndLayout) {
  torch::set_num_threads(1);
  const std::string family = GetParam();
  const int steps = 2, B = 3, mbs = 2;
  // One stage; three stages with cuts inside blocks (k = 4: after attn_in and after
  // mlp_in) and dp 2 in the middle; whole blocks under GPipe.
  const std::vector<Layout> layouts = {
      {"1 stage k2", 2, {}, {1}, ScheduleKind::k1F1B},
      {"3 stages k4 dp 1|2|1", 4, {2, 7}, {1, 2, 1}, ScheduleKind::kHarp1F1B},
      {"2 stages k1 gpipe", 1, {2}, {1, 1}, ScheduleKind::kGpipe},
  };
  for (const Layout& l : layouts) {
    const model::ModelSpec m = tiny_model(family, l.k, /*tied=*/family == "gpt", /*blocks=*/3);
    auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
    const plan::Plan base = make_plan(m, l.cuts, l.dp, B, mbs, l.kind);
    const RankRun want = run_plan_threads(m, base, *data, steps, config());
    for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
      runtime::ExecConfig cfg = config();
      cfg.recompute = r;  // every stage
      expect_identical(run_plan_threads(m, base, *data, steps, cfg), want,
                       family + " " + l.name + " " + recompute_name(r));
    }
    if (base.num_stages() == 3) {  // per stage, from the plan; and under bf16 autocast
      plan::Plan mixed = base;
      mixed.stages[0].recompute = Recompute::kFull;
      mixed.stages[1].recompute = Recompute::kSelective;
      expect_identical(run_plan_threads(m, mixed, *data, steps, config()), want, family + " " + l.name + " mixed");
      runtime::ExecConfig bf16 = config();
      bf16.dtype = torch::kBFloat16;
      expect_identical(run_plan_threads(m, mixed, *data, steps, bf16), run_plan_threads(m, base, *data, steps, bf16),
                       family + " " + l.name + " mixed, bf16");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, RecomputeBitIdentical, ::testing::Values("gpt", "llama"));

// What a one-stage, one-rank run keeps per microbatch in flight, (peak - base) / B, for
// each recomputation mode, GPipe with B microbatches in flight at the step's peak (the
// process's counter is the rank's).
constexpr int kBlocks = 4, kB = 4, kMbs = 2, kSeq = 64, kHeads = 4;
std::map<Recompute, double> kept_per_microbatch(torch::Dtype dtype) {
  torch::set_num_threads(1);
  runtime::install_counting_allocator();
  const model::ModelSpec m = tiny_gpt(2, /*tied=*/false, kBlocks, /*hidden=*/32, kHeads, kSeq, /*vocab=*/64);
  auto data = runtime::synthetic_tokens(5, 1 << 15, m.gpt.vocab);
  std::map<Recompute, double> kept;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    plan::Plan p = make_plan(m, {}, {1}, kB, kMbs, ScheduleKind::kGpipe);
    runtime::TrainOptions o;
    o.exec = config();
    o.exec.dtype = dtype;
    o.exec.recompute = r;
    o.progress = false;
    o.steps = 3;
    o.measure_memory = true;
    o.out_dir = std::string(HARP_BINARY_DIR) + "/recompute_test/" + std::string(c10::toString(dtype)) + "_" +
                recompute_name(r);
    std::filesystem::remove_all(o.out_dir);
    const runtime::TrainSummary s = train_threads(m, p, *data, o);
    EXPECT_EQ(s.peak_bytes.size(), 1u);
    if (s.peak_bytes.size() != 1) return kept;
    kept[r] = (s.peak_bytes[0] - s.base_bytes[0]) / kB;
    std::printf("%s recompute %-9s peak %.0f bytes above the state (%.0f per microbatch in flight)\n",
                c10::toString(dtype), recompute_name(r), s.peak_bytes[0] - s.base_bytes[0], kept[r]);
  }
  return kept;
}

// What each mode keeps shrinks by the attention probabilities under selective, and to
// little more than the blocks' inputs and the head's and tail's activations under full.
TEST(RecomputeMemory, EachModeKeepsLessPerMicrobatch) {
  std::map<Recompute, double> kept = kept_per_microbatch(torch::kFloat32);
  ASSERT_EQ(kept.size(), 3u);
  // Selective frees the float32 softmax output of every block ([b, a, s, s]) of every
  // microbatch in flight, less what the backward's rerun of one block's core holds at a
  // time (its scores, scaled and masked scores and probabilities: at most 4 such).
  const double probs_per_block = 4.0 * kMbs * kHeads * kSeq * kSeq;
  EXPECT_GE(kB * (kept[Recompute::kNone] - kept[Recompute::kSelective]),
            kB * kBlocks * probs_per_block - 4 * probs_per_block);
  // Full keeps less than selective, and under half of no recomputation here.
  EXPECT_LT(kept[Recompute::kFull], kept[Recompute::kSelective]);
  EXPECT_LT(kept[Recompute::kFull], 0.5 * kept[Recompute::kNone]);
}

// Under bf16 autocast the softmax runs in float32 but keeps its probabilities in bf16
// only: 2 bytes per score, what selective frees (libtorch's softmax with a float32 dtype
// kept its float32 output and the product with v a bf16 copy: 6 bytes).
TEST(RecomputeMemory, Bf16KeepsTheProbabilitiesInBf16) {
  std::map<Recompute, double> kept = kept_per_microbatch(torch::kBFloat16);
  ASSERT_EQ(kept.size(), 3u);
  const double probs_per_block = 2.0 * kMbs * kHeads * kSeq * kSeq;  // bf16 [b, a, s, s]
  const double freed = kB * (kept[Recompute::kNone] - kept[Recompute::kSelective]);
  // The rerun of one block's core holds up to 6 float32-sized score tensors at a time.
  EXPECT_GE(freed, kB * kBlocks * probs_per_block - 12 * probs_per_block);
  EXPECT_LE(freed, kB * kBlocks * probs_per_block * 1.25);
  EXPECT_LT(kept[Recompute::kFull], kept[Recompute::kSelective]);
}

}  // namespace
}  // namespace harp::testing
