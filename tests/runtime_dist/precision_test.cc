// Mixed precision's pieces that run on the CPU (precision.h, executor.h): dynamic loss
// scaling against the unscaled run (bit for bit: the scales are powers of two), an
// overflowing step skipped on every rank with the scale halved, the scaler's rule by
// hand, and the data-parallel gradient all-reduce in float16 over Gloo against float32.
// float16 compute itself needs CUDA (scripts/gpu_check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "harp/common/document.h"
#include "harp/runtime/io/checkpoint.h"
#include "harp/runtime/nn/precision.h"
#include "rank_threads.h"

namespace harp::testing {
namespace {

using plan::ScheduleKind;
using Named = std::vector<std::pair<std::string, torch::Tensor>>;

runtime::ExecConfig config() { return equivalence_config(torch::kFloat32); }

std::map<std::string, torch::Tensor> by_name(const Named& named) { return {named.begin(), named.end()}; }

// Three stages (cuts inside blocks), dp 2 in the middle: the loss scale crosses cuts
// in the backward's gradients and meets the data-parallel reduction.
plan::Plan three_stage_plan(const model::ModelSpec& m) {
  return make_plan(m, {2, 7}, {1, 2, 1}, 3, 2, ScheduleKind::kHarp1F1B);
}

TEST(LossScaling, DynamicScalingIsBitForBitTheUnscaledRun) {
  torch::set_num_threads(1);
  const model::ModelSpec m = three_block_model(4);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const plan::Plan p = three_stage_plan(m);
  const RankRun want = run_plan_threads(m, p, *data, 3, config());
  runtime::ExecConfig scaled = config();
  scaled.loss_scale = 65536;  // GradScaler's first scale
  const RankRun got = run_plan_threads(m, p, *data, 3, scaled);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) EXPECT_EQ(got.losses[s], want.losses[s]) << "step " << s;
  auto params = by_name(got.params), grads = by_name(got.grads);
  for (const auto& [name, w] : want.params) EXPECT_TRUE(torch::equal(params.at(name), w)) << name;
  // The gradients the update leaves in .grad() are unscaled (and clipped), as PyTorch's
  // GradScaler.unscale_ and clip_grad_norm_ leave them: the unscaled run's, bit for bit
  // (the scale is a power of two, so the scaled gradients, their norm and the kernel's
  // division by the scale are all exact).
  for (const auto& [name, w] : want.grads) EXPECT_TRUE(torch::equal(grads.at(name), w)) << name;
}

std::vector<Json> metric_lines(const std::string& dir) {
  std::vector<Json> out;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(Json::parse(line));
  return out;
}

// A scale so large that the scaled loss overflows float32: every rank skips the update
// together, the parameters stay bit for bit what they were (a run with lr 0 gives those),
// the scale halves at every skip until a step goes through.
TEST(LossScaling, AnOverflowSkipsTheUpdateOnEveryRankAndHalvesTheScale) {
  torch::set_num_threads(1);
  const model::ModelSpec m = three_block_model(4);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const plan::Plan p = three_stage_plan(m);
  runtime::ExecConfig huge = config();
  huge.loss_scale = std::ldexp(1.0, 127);
  runtime::ExecConfig frozen = config();
  frozen.optim.lr = frozen.optim.min_lr = 0;  // AdamW with lr 0 leaves every parameter as it was
  const RankRun skipped = run_plan_threads(m, p, *data, 1, huge);
  const RankRun untouched = run_plan_threads(m, p, *data, 1, frozen);
  EXPECT_EQ(skipped.losses, untouched.losses);  // the forward is unaffected
  auto params = by_name(skipped.params);
  for (const auto& [name, w] : untouched.params) EXPECT_TRUE(torch::equal(params.at(name), w)) << name;

  runtime::TrainOptions o;
  o.exec = huge;
  o.steps = 6;
  o.progress = false;
  o.out_dir = std::string(HARP_BINARY_DIR) + "/precision_test/overflow";
  std::filesystem::remove_all(o.out_dir);
  const runtime::TrainSummary s = train_threads(m, p, *data, o);
  ASSERT_EQ(s.losses.size(), 6u);
  const std::vector<Json> lines = metric_lines(o.out_dir);
  ASSERT_EQ(lines.size(), 6u);
  double scale = huge.loss_scale;
  int skips = 0;
  for (const Json& line : lines) {
    EXPECT_DOUBLE_EQ(line["loss_scale"].get<double>(), scale) << line.dump();
    if (line["skipped"].get<bool>()) {
      ++skips;
      scale /= 2;
    } else {
      EXPECT_TRUE(std::isfinite(line["grad_norm"].get<double>())) << line.dump();
    }
  }
  EXPECT_GE(skips, 1);
  EXPECT_FALSE(lines.back()["skipped"].get<bool>()) << "the scale came down to a finite step";
  EXPECT_LT(s.losses.back(), s.losses.front()) << "the run trains once the scale fits";
}

// Dynamic loss scaling's state is in the checkpoint (as GradScaler's state_dict): a run
// stopped while the scale is still coming down, or counting good steps towards a
// doubling, resumes with the scale and count it had, so the resumed run's losses and
// scales are the uninterrupted run's bit for bit. A damaged state is refused by name.
TEST(LossScaling, TheScaleAndItsCountResumeFromTheCheckpoint) {
  torch::set_num_threads(1);
  const model::ModelSpec m = three_block_model(4);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const plan::Plan p = three_stage_plan(m);
  const std::string root = std::string(HARP_BINARY_DIR) + "/precision_test/resume";
  std::filesystem::remove_all(root);
  runtime::TrainOptions o;
  o.exec = config();
  o.exec.loss_scale = std::ldexp(1.0, 127);  // overflows: skips until it comes down
  o.exec.loss_scale_growth_interval = 3;     // and then doubles within the run
  o.progress = false;
  o.checkpoint_every = 2;
  o.steps = 8;
  o.out_dir = root + "/straight";
  const runtime::TrainSummary straight = train_threads(m, p, *data, o);
  o.out_dir = root + "/stopped";
  for (int steps : {2, 4, 6, 8}) {  // stopped three times, while skipping and while counting
    o.steps = steps;
    o.resume = steps > 2;
    train_threads(m, p, *data, o);
  }
  const std::vector<Json> want = metric_lines(root + "/straight"), got = metric_lines(root + "/stopped");
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  std::set<double> scales;
  int skips = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i]["loss"], want[i]["loss"]) << "step " << i;
    EXPECT_EQ(got[i]["loss_scale"], want[i]["loss_scale"]) << "step " << i;
    EXPECT_EQ(got[i]["skipped"], want[i]["skipped"]) << "step " << i;
    scales.insert(want[i]["loss_scale"].get<double>());
    skips += want[i]["skipped"].get<bool>() ? 1 : 0;
  }
  EXPECT_GE(skips, 2) << "the scale came down after the first checkpoint";
  EXPECT_GE(scales.size(), 3u) << "the scale moved";
  EXPECT_GT(want.back()["loss_scale"].get<double>(), std::ldexp(1.0, 125)) << "a doubling after the lowest scale";
  int counting = 0;  // checkpoints taken part way to a doubling
  for (int step : {2, 4, 6}) {
    const Json manifest =
        load_document(runtime::checkpoint_step_dir(root + "/stopped/checkpoints", step) + "/manifest.json").value();
    counting += manifest["loss_scaler"]["good_steps"].get<int>() > 0 ? 1 : 0;
  }
  EXPECT_GE(counting, 1);

  // A damaged state: one line naming the file, the field and the rule.
  const std::string file = root + "/stopped/checkpoints/step_000008/manifest.json";
  Json edited = load_document(file).value();
  edited["loss_scaler"]["scale"] = 3.0;
  std::ofstream(file) << edited.dump(2);
  o.steps = 9;
  o.resume = true;
  const std::vector<std::string> errors = train_threads_errors(m, p, *data, o);
  ASSERT_FALSE(errors.empty());
  // Every rank reads the manifest and refuses it; a rank that was still setting up its
  // groups when a peer had already refused and closed its connections reports that peer
  // instead (seen once in a fresh-clone CI run: "Connection closed by peer"). At least
  // one names the file, the field and the rule; none says anything else.
  int named = 0;
  for (const std::string& e : errors) {
    const bool names = e.find("manifest.json") != std::string::npos && e.find("loss_scaler.scale") != std::string::npos &&
                       e.find("power of two") != std::string::npos;
    named += names ? 1 : 0;
    EXPECT_TRUE(names || e.find("closed by peer") != std::string::npos) << e;
  }
  EXPECT_GE(named, 1);
}

TEST(LossScaling, TheScalersRuleByHand) {
  runtime::LossScaler off;
  EXPECT_FALSE(off.enabled());
  EXPECT_TRUE(off.update(true));
  EXPECT_FALSE(off.update(false));  // off, an overflow still skips; nothing to move
  runtime::LossScaler s;
  s.scale = 1024;
  s.growth_interval = 3;
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale, 1024);
  EXPECT_TRUE(s.update(true));  // the third good step in a row doubles it
  EXPECT_EQ(s.scale, 2048);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // an overflow halves it and restarts the count
  EXPECT_EQ(s.scale, 1024);
  EXPECT_EQ(s.good_steps, 0);
  s.scale = 1;
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale, runtime::LossScaler::kMinScale);  // never below 1
  s.scale = runtime::LossScaler::kMaxScale;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale, runtime::LossScaler::kMaxScale);  // nor above float32's largest power of two
}

// dp 2 reducing in float16 over Gloo (with the loss scaled, as float16 training does):
// within float16's rounding of the float32 reduction, and not identical to it (the
// gradients really were reduced in float16).
TEST(GradReduceDtype, Float16ReductionIsWithinItsRoundingOfFloat32) {
  torch::set_num_threads(1);
  const model::ModelSpec m = three_block_model(4);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const plan::Plan p = make_plan(m, {}, {2}, 2, 2, ScheduleKind::k1F1B);
  runtime::ExecConfig f32 = config();
  f32.loss_scale = 256;
  runtime::ExecConfig f16 = f32;
  f16.grad_reduce_dtype = torch::kHalf;
  // One step: the same parameters, so the gradients differ by the reduction alone.
  const RankRun want = run_plan_threads(m, p, *data, 1, f32);
  const RankRun got = run_plan_threads(m, p, *data, 1, f16);
  auto grads = by_name(got.grads);
  bool any_differs = false;
  for (const auto& [name, w] : want.grads) {
    const torch::Tensor g = grads.at(name);
    // float16 keeps 11 bits: two roundings of the replicas' gradients and one of their
    // sum, each within 2^-11 of the tensor's largest element.
    const double bound = 3 * std::ldexp(1.0, -11) * w.abs().max().item<double>();
    EXPECT_LE((g - w).abs().max().item<double>(), bound) << name;
    any_differs = any_differs || !torch::equal(g, w);
  }
  // Over three steps the runs stay within float16's rounding of each other.
  const RankRun want3 = run_plan_threads(m, p, *data, 3, f32), got3 = run_plan_threads(m, p, *data, 3, f16);
  for (size_t s = 0; s < want3.losses.size(); ++s) EXPECT_NEAR(got3.losses[s], want3.losses[s], 1e-3 * want3.losses[s]);
  EXPECT_TRUE(any_differs) << "float16 reduction gave float32's bits: was it reduced in float16?";
}

}  // namespace
}  // namespace harp::testing
