// Resuming from checkpoints: a resumed run continues with exactly the losses of an
// uninterrupted one (bitwise on the same plan), on another plan of the same model (up to
// float32 rounding), across tp degrees; what may not differ is refused; retention; and
// corrupt or crafted files are refused with their name.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "harp/common/document.h"
#include "harp/common/sha256.h"
#include "harp/runtime/io/checkpoint.h"
#include "rank_threads.h"
#include "testutil/status.h"

namespace harp::testing {
namespace {

using plan::ScheduleKind;

model::ModelSpec tiny(int k, const std::string& family = "gpt", int vocab = 64) {
  return three_block_model(k, family, vocab);
}

// Training options of the resume tests: the shared optimizer, no progress lines,
// checkpoints every `checkpoint_every` steps in `out_dir`.
runtime::TrainOptions resume_options(const std::string& out_dir, int steps, int checkpoint_every) {
  runtime::TrainOptions o;
  o.exec.optim = equivalence_optim();
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

// Resuming on another plan of the same model (elastic training, item 1): a checkpoint of
// a 3-stage dp 2 run continues on 2 stages, on 1 stage with tp 2, and on another
// microbatch split of the same global batch. The data order is a function of (seed,
// step, sample) and the files hold full tensors under global names, so the continued
// losses equal the uninterrupted run's up to float32 rounding (dp and tp sum in another
// order).
TEST(Resume, OnAnyPlanOfTheSameModel) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(2);  // L = 8: embed, 3 x (attention, MLP), head
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/resume_plan_test";
  std::filesystem::remove_all(root);
  const plan::Plan before = make_plan(m, {3, 6}, {2, 2, 2}, 4, 2, ScheduleKind::k1F1B);
  runtime::TrainOptions o = resume_options(root + "/straight", 4, 0);
  const runtime::TrainSummary straight = train_threads(m, before, *data, o);
  ASSERT_EQ(straight.losses.size(), 4u);
  o.out_dir = root + "/stopped";
  o.steps = 2;
  o.checkpoint_every = 2;
  ASSERT_EQ(train_threads(m, before, *data, o).losses.size(), 2u);
  const struct {
    std::string name;
    plan::Plan plan;
  } afters[] = {
      {"2 stages, dp 1 | 2, HARP-1F1B", make_plan(m, {4}, {1, 2}, 4, 2, ScheduleKind::kHarp1F1B, {2, 1})},
      {"1 stage, tp 2", make_plan(m, {}, {1}, 4, 2, ScheduleKind::k1F1B, {}, {2})},
      {"2 stages, 8 microbatches of 1", make_plan(m, {2}, {1, 1}, 8, 1, ScheduleKind::k1F1B)},
      {"3 stages, 2 microbatches of 4, GPipe", make_plan(m, {1, 5}, {1, 2, 1}, 2, 4, ScheduleKind::kGpipe)},
  };
  int i = 0;
  for (const auto& after : afters) {
    SCOPED_TRACE(after.name);
    o.out_dir = root + "/after_" + std::to_string(i++);
    std::filesystem::copy(root + "/stopped", o.out_dir, std::filesystem::copy_options::recursive);
    o.steps = 4;
    o.resume = true;
    const runtime::TrainSummary second = train_threads(m, after.plan, *data, o);
    EXPECT_EQ(second.first_step, 2);
    ASSERT_EQ(second.losses.size(), 2u);
    for (int s = 0; s < 2; ++s)
      EXPECT_NEAR(second.losses[s], straight.losses[2 + s], 1e-5 * straight.losses[2 + s]) << "step " << 2 + s;
    o.resume = false;
  }
  // The manifest counts the stage files: a stale one from a stopped run on more stages,
  // left in a folder the 2-stage run rewrote, is not read.
  const std::string ckpt = root + "/after_0/checkpoints";
  long long counter = 0;
  const auto clean = runtime::read_checkpoint(ckpt, 4, &counter);
  HARP_ASSERT_OK(clean.status());
  HARP_ASSERT_OK(write_text_file_atomic(runtime::checkpoint_step_dir(ckpt, 4) + "/stage_2.bin", "stale"));
  const auto again = runtime::read_checkpoint(ckpt, 4, &counter);
  HARP_ASSERT_OK(again.status());
  EXPECT_EQ(again->size(), clean->size());
  EXPECT_EQ(counter, 4);
}

// What must match to resume: the global batch (the samples of a step) and the seed (the
// data order); each is refused with the difference and the fix.
TEST(Resume, AnotherGlobalBatchOrSeedIsRefused) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/resume_layout_test";
  std::filesystem::remove_all(root);
  runtime::TrainOptions o = resume_options(root, 2, 2);
  train_threads(m, make_plan(m, {3}, {1, 1}, 2, 2, ScheduleKind::k1F1B), *data, o);
  o.steps = 4;
  o.resume = true;
  auto errors = train_threads_errors(m, make_plan(m, {5}, {1, 1}, 2, 1, ScheduleKind::k1F1B), *data, o);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("the checkpoint was written with global_batch = 4, this run has 2; keep microbatches x "
                           "microbatch_size equal"),
            std::string::npos)
      << errors[0];
  o.exec.seed = 99;
  errors = train_threads_errors(m, make_plan(m, {3}, {2, 1}, 2, 2, ScheduleKind::k1F1B), *data, o);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("seed = \"1234\", this run has \"99\"; resume with the seed the run was started with"),
            std::string::npos)
      << errors[0];
}

// Asynchronous checkpoints hold the state of their step, not of a later one: the writer
// works from copies while the next steps update the parameters. Every checkpoint of an
// asynchronous run is complete and bitwise equal to the synchronous run's, and `latest`
// names the last.
TEST(Resume, AsynchronousCheckpointsHoldTheirStepsState) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const std::string root = std::string(HARP_BINARY_DIR) + "/async_ckpt_test";
  std::filesystem::remove_all(root);
  const plan::Plan p = make_plan(m, {3, 6}, {1, 2, 1}, 3, 2, ScheduleKind::kHarp1F1B, {3, 2, 1}, {2, 1, 1});
  runtime::TrainOptions o = resume_options(root + "/sync", 5, 2);
  o.async_checkpoints = false;
  const runtime::TrainSummary sync = train_threads(m, p, *data, o);
  o.out_dir = root + "/async";
  o.async_checkpoints = true;
  // The writer starts after the next step has updated the parameters.
  o.before_checkpoint_write = [] { std::this_thread::sleep_for(std::chrono::milliseconds(400)); };
  const runtime::TrainSummary async = train_threads(m, p, *data, o);
  EXPECT_EQ(async.losses, sync.losses);
  ASSERT_EQ(async.checkpoints.size(), 2u);  // steps 2 and 4
  EXPECT_EQ(async.checkpoints[1].step, 4);
  EXPECT_GT(async.checkpoints[1].write_s, 0);  // rank 0 writes stage 0's file
  EXPECT_EQ(runtime::latest_checkpoint_step(root + "/async/checkpoints").value(), 4);
  for (int step : {2, 4}) {
    long long a_steps = 0, s_steps = 0;
    const auto a = runtime::read_checkpoint(root + "/async/checkpoints", step, &a_steps);
    const auto b = runtime::read_checkpoint(root + "/sync/checkpoints", step, &s_steps);
    HARP_ASSERT_OK(a.status());
    HARP_ASSERT_OK(b.status());
    EXPECT_EQ(a_steps, s_steps);
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_EQ((*a)[i].first, (*b)[i].first);
      EXPECT_TRUE(torch::equal((*a)[i].second, (*b)[i].second)) << "step " << step << " " << (*a)[i].first;
    }
  }
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

// A stop request (harp train: SIGUSR1) from any one rank ends every rank after the next
// checkpoint, complete; with no checkpoints, one is written at once. The run then
// resumes as if never stopped.
TEST(Resume, AStopRequestEndsEveryRankAfterTheNextCheckpoint) {
  torch::set_num_threads(1);
  const model::ModelSpec m = tiny(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  plan::Plan p = make_plan(m, {3, 6}, {1, 2, 1}, 3, 2, ScheduleKind::kHarp1F1B, {3, 2, 1});
  const std::string root = std::string(HARP_BINARY_DIR) + "/resume_stop_test";
  std::filesystem::remove_all(root);
  runtime::TrainOptions o = resume_options(root + "/straight", 8, 0);
  const runtime::TrainSummary straight = train_threads(m, p, *data, o);
  for (const int every : {4, 0}) {
    SCOPED_TRACE("checkpoint_every " + std::to_string(every));
    o = resume_options(root + "/stopped_" + std::to_string(every), 8, every);
    std::atomic<int> polls{0};
    o.stop_requested = [&] { return ++polls == 3; };  // one rank of four, during step 0
    const runtime::TrainSummary stopped = train_threads(m, p, *data, o);
    const int want = every > 0 ? every : 1;
    EXPECT_EQ(stopped.stopped_at, want);
    ASSERT_EQ(stopped.losses.size(), static_cast<size_t>(want));
    auto latest = runtime::latest_checkpoint_step(o.out_dir + "/checkpoints");
    ASSERT_TRUE(latest.ok()) << latest.status().to_string();
    EXPECT_EQ(*latest, want);
    o.stop_requested = nullptr;
    o.resume = true;
    const runtime::TrainSummary rest = train_threads(m, p, *data, o);
    EXPECT_EQ(rest.stopped_at, -1);
    ASSERT_EQ(rest.losses.size(), static_cast<size_t>(8 - want));
    for (int s = 0; s < want; ++s) EXPECT_EQ(stopped.losses[s], straight.losses[s]) << "step " << s;
    for (int s = want; s < 8; ++s) EXPECT_EQ(rest.losses[s - want], straight.losses[s]) << "step " << s;
  }
}

}  // namespace
}  // namespace harp::testing
