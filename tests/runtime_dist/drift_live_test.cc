// Drift detection in a run (runtime/io/drift.h): two stages as thread ranks; stage 1's
// compute is made 5x slower from step 10 on (the executor's extra slowdown, as an
// emulated device is slowed): the run names stage 1 within the window, in its summary
// and metrics.jsonl, on every rank alike; the same run without the slowdown reports
// nothing over 30 steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harp/common/document.h"
#include "rank_threads.h"
#include "testutil/tiny_gpt.h"

namespace harp::runtime {
namespace {

const std::string kRoot = std::string(HARP_BINARY_DIR) + "/drift_live_test";

TrainSummary run(const std::string& name, bool slow) {
  torch::set_num_threads(1);
  // Enough compute per microbatch (milliseconds) that scheduling noise is small beside it.
  const model::ModelSpec m = testing::tiny_gpt(1, true, /*blocks=*/2, /*hidden=*/96, /*heads=*/4, /*seq=*/64, 64);
  const plan::Plan p = testing::make_plan(m, {2}, {1, 1}, 4, 2, plan::ScheduleKind::k1F1B);
  auto data = synthetic_tokens(3, 1 << 16, m.gpt.vocab);
  TrainOptions o;
  o.progress = false;
  o.steps = 30;
  o.out_dir = kRoot + "/" + name;
  o.drift = {2.5, 5};
  if (slow) o.fake_slowdown = [](int step, int stage) { return stage == 1 && step >= 10 ? 5.0 : 1.0; };
  std::filesystem::remove_all(o.out_dir);
  return testing::train_threads(m, p, *data, o);
}

// The testbed's device slowdown file (harp testbed set --device-slowdown): written "5"
// before step 10 (by the step hook), read by the ranks before each step; the run's
// drift detection sees the pipeline's bound move 5x.
TEST(DriftLive, TheTestbedSlowdownFileSlowsTheRanks) {
  torch::set_num_threads(1);
  const model::ModelSpec m = testing::tiny_gpt(1, true, 2, 96, 4, 64, 64);
  const plan::Plan p = testing::make_plan(m, {2}, {1, 1}, 4, 2, plan::ScheduleKind::k1F1B);
  auto data = synthetic_tokens(3, 1 << 16, m.gpt.vocab);
  TrainOptions o;
  o.progress = false;
  o.steps = 24;
  o.out_dir = kRoot + "/file";
  o.drift = {2.5, 5};
  o.slowdown_file = kRoot + "/slowdown";
  std::filesystem::create_directories(kRoot);
  std::filesystem::remove(o.slowdown_file);
  const std::string file = o.slowdown_file;
  o.fake_slowdown = [file](int step, int stage) {
    if (step == 10 && stage == 0) std::ofstream(file) << "5\n";
    return 1.0;
  };
  std::filesystem::remove_all(o.out_dir);
  const TrainSummary s = testing::train_threads(m, p, *data, o);
  ASSERT_EQ(s.drifts.size(), 1u);
  EXPECT_GE(s.drifts[0].step, 10);
  EXPECT_LE(s.drifts[0].step, 10 + 5);
  EXPECT_GT(s.drifts[0].ratio, 2.5);
}

TEST(DriftLive, ASlowedStageIsNamedAndAnUnchangedRunReportsNothing) {
  const TrainSummary slowed = run("slowed", true);
  ASSERT_EQ(slowed.drifts.size(), 1u);
  EXPECT_EQ(slowed.drifts[0].stage, 1);
  EXPECT_GE(slowed.drifts[0].step, 10);
  EXPECT_LE(slowed.drifts[0].step, 10 + 5);
  EXPECT_GT(slowed.drifts[0].ratio, 2.5);
  int records = 0;
  std::ifstream in(kRoot + "/slowed/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (Json::parse(line).contains("drift_after_steps")) ++records;
  EXPECT_EQ(records, 1);
  EXPECT_TRUE(run("unchanged", false).drifts.empty());
}

}  // namespace
}  // namespace harp::runtime
