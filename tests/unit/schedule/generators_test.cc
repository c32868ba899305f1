// Generators against per-rank orders written out by hand from DESIGN.md's rule (W_i
// warm-up forwards, then one F one B, then the remaining Bs), and the launch-count rules.
#include "harp/schedule/generators.h"

#include <gtest/gtest.h>

#include "testutil/status.h"

namespace harp::schedule {
namespace {

std::string text(const Schedule& s) { return schedule_to_text(s); }

TEST(Generators, OneFOneBThreeStagesFourMicrobatches) {
  // N = {3, 2, 1}: stage 0 warms up with 2 forwards, stage 2 alternates from the start.
  const Schedule s = generate_1f1b(3, 4);
  EXPECT_EQ(s.num_stages, 3);
  EXPECT_EQ(s.num_microbatches, 4);
  EXPECT_EQ(text(s),
            "rank 0: 0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3\n"
            "rank 1: 1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3\n"
            "rank 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3\n");
}

TEST(Generators, GpipeTwoStagesThreeMicrobatches) {
  EXPECT_EQ(text(generate_gpipe(2, 3)),
            "rank 0: 0F0 0F1 0F2 0B0 0B1 0B2\n"
            "rank 1: 1F0 1F1 1F2 1B0 1B1 1B2\n");
}

TEST(Generators, OneFOneBWithFewerMicrobatchesThanStages) {
  // min(S - i, M) = {2, 2, 2, 1}.
  EXPECT_EQ(text(generate_1f1b(4, 2)),
            "rank 0: 0F0 0F1 0B0 0B1\n"
            "rank 1: 1F0 1F1 1B0 1B1\n"
            "rank 2: 2F0 2F1 2B0 2B1\n"
            "rank 3: 3F0 3B0 3F1 3B1\n");
}

TEST(Generators, HeterogeneousLaunchCounts) {
  StatusOr<Schedule> s = generate_with_launch_counts(3, 5, {4, 2, 1});
  HARP_ASSERT_OK(s);
  EXPECT_EQ(text(*s),
            "rank 0: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 0B2 0B3 0B4\n"
            "rank 1: 1F0 1F1 1B0 1F2 1B1 1F3 1B2 1F4 1B3 1B4\n"
            "rank 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 2F4 2B4\n");
}

TEST(Generators, SingleStage) {
  EXPECT_EQ(text(generate_1f1b(1, 3)), "rank 0: 0F0 0B0 0F1 0B1 0F2 0B2\n");
  EXPECT_EQ(text(generate_gpipe(1, 2)), "rank 0: 0F0 0F1 0B0 0B1\n");
}

void expect_rejected(int stages, int microbatches, const std::vector<int>& n,
                     const std::string& fragment) {
  StatusOr<Schedule> s = generate_with_launch_counts(stages, microbatches, n);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(fragment), std::string::npos) << s.status().message();
}

TEST(Generators, RejectsBadLaunchCounts) {
  expect_rejected(3, 4, {2, 3, 1}, "stage 1");           // increasing
  expect_rejected(3, 4, {2, 3, 1}, "must not increase");
  expect_rejected(2, 4, {1, 0}, "stage 1");              // zero
  expect_rejected(2, 4, {5, 1}, "stage 0");              // above M
  expect_rejected(2, 4, {5, 1}, "[1, 4]");
  expect_rejected(3, 4, {2, 1}, "2 values for 3 stages");
  expect_rejected(0, 4, {}, "at least one stage");
  expect_rejected(1, 0, {1}, "at least one microbatch");
}

plan::Plan three_stage_plan(int microbatches) {
  plan::Plan p;
  p.microbatches = microbatches;
  p.stages.resize(3);
  for (auto& s : p.stages) {
    s.fwd_s = 1;
    s.bwd_s = 2;
  }
  return p;
}

TEST(Generators, LaunchCountsForPlan) {
  plan::Plan p = three_stage_plan(8);
  EXPECT_EQ(launch_counts_for(p, plan::ScheduleKind::kGpipe), (std::vector<int>{8, 8, 8}));
  EXPECT_EQ(launch_counts_for(p, plan::ScheduleKind::k1F1B), (std::vector<int>{3, 2, 1}));
  // P = max(t = 3, c = 2) = 3: the 0->1 link (c = 2 >= P/2) gets δ = 3, the 1->2 link
  // (c = 0.1 < P/10) δ = 1, so N = {1 + 1 + 3, 1 + 1, 1}.
  p.stages[0].crosses_nodes = true;
  p.stages[0].comm_s = 2;
  p.stages[1].crosses_nodes = true;
  p.stages[1].comm_s = 0.1;
  EXPECT_EQ(launch_counts_for(p, plan::ScheduleKind::kHarp1F1B), (std::vector<int>{5, 2, 1}));
  // Only some launch counts set: the δ rule still decides.
  p.stages[0].launch_count = 7;
  EXPECT_EQ(launch_counts_for(p, plan::ScheduleKind::kHarp1F1B), (std::vector<int>{5, 2, 1}));
  // All set: taken as they are.
  p.stages[1].launch_count = 3;
  p.stages[2].launch_count = 1;
  EXPECT_EQ(launch_counts_for(p, plan::ScheduleKind::kHarp1F1B), (std::vector<int>{7, 3, 1}));
}

TEST(Generators, GenerateForPlan) {
  plan::Plan p = three_stage_plan(4);
  StatusOr<Schedule> s = generate_for_plan(p, plan::ScheduleKind::k1F1B);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(text(*s), text(generate_1f1b(3, 4)));
  // A plan whose launch counts increase is bad input, not a crash.
  p.stages[0].launch_count = 1;
  p.stages[1].launch_count = 2;
  p.stages[2].launch_count = 1;
  StatusOr<Schedule> bad = generate_for_plan(p, plan::ScheduleKind::kHarp1F1B);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stage 1"), std::string::npos);
}

}  // namespace
}  // namespace harp::schedule
