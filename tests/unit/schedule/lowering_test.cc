// Lowering against lists derived by hand with the round-robin rule of lowering.h: a
// rank places its next compute once its RECV has been placed by the producer.
#include "harp/schedule/lowering.h"

#include <gtest/gtest.h>

#include "testutil/status.h"

#include "harp/schedule/generators.h"
#include "harp/schedule/validate.h"

namespace harp::schedule {
namespace {

Schedule parse(const std::string& text) {
  StatusOr<Schedule> s = parse_schedule_text(text);
  HARP_EXPECT_OK(s);
  return *s;
}

std::string lowered_text(const Schedule& compute) {
  StatusOr<Schedule> s = lower(compute);
  HARP_EXPECT_OK(s);
  return s.ok() ? schedule_to_text(*s) : "";
}

TEST(Lowering, OneFOneBTwoStagesTwoMicrobatches) {
  // Round 1: r0 F0 (+RECV_F0 on r1), r1 F0. Round 2: r0 F1 (+RECV_F1), r1 B0 (+RECV_B0).
  // Round 3: r0 B0, r1 F1. Round 4: r0 waits for RECV_B1, r1 B1 (+RECV_B1). Round 5: r0 B1.
  EXPECT_EQ(lowered_text(generate_1f1b(2, 2)),
            "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0REDUCE_GRAD 0STEP\n"
            "rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 1REDUCE_GRAD 1STEP\n");
}

TEST(Lowering, GpipeTwoStagesTwoMicrobatches) {
  EXPECT_EQ(lowered_text(generate_gpipe(2, 2)),
            "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0REDUCE_GRAD 0STEP\n"
            "rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1 1REDUCE_GRAD 1STEP\n");
}

TEST(Lowering, SingleStageHasNoCommunication) {
  EXPECT_EQ(lowered_text(generate_1f1b(1, 2)), "rank 0: 0F0 0B0 0F1 0B1 0REDUCE_GRAD 0STEP\n");
}

TEST(Lowering, KeepsComputeOrderAndSetsShape) {
  const Schedule compute = generate_with_launch_counts(4, 6, {5, 3, 2, 1}).value();
  StatusOr<Schedule> lowered = lower(compute);
  ASSERT_TRUE(lowered.ok());
  EXPECT_EQ(lowered->num_stages, 4);
  EXPECT_EQ(lowered->num_microbatches, 6);
  for (int r = 0; r < 4; ++r) {
    std::vector<Action> only_compute;
    for (const Action& a : lowered->actions[r])
      if (a.is_compute()) only_compute.push_back(a);
    EXPECT_EQ(only_compute, compute.actions[r]) << "rank " << r;
  }
  EXPECT_TRUE(validate(*lowered, SendMode::kRendezvous).ok);
}

TEST(Lowering, CrossRankCycleIsReported) {
  // r1 wants F1 first, but r0 only produces F1 after B0, which needs r1's B0.
  StatusOr<Schedule> s = lower(parse("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1F0 1B0 1B1\n"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = s.status().message();
  EXPECT_NE(m.find("rank 0 at 0B0"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1 at 1F1"), std::string::npos) << m;
}

TEST(Lowering, BackwardBeforeItsForwardIsReported) {
  StatusOr<Schedule> s = lower(parse("rank 0: 0B0 0F0\n"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("rank 0 at 0B0"), std::string::npos);
}

TEST(Lowering, RejectsNonComputeInput) {
  StatusOr<Schedule> s = lower(lower(generate_1f1b(2, 2)).value());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("only F, B, I and W"), std::string::npos);

  Schedule wrong_stage = parse("rank 0: 0F0 0B0\nrank 1: 0F0 0B0\n");
  EXPECT_FALSE(lower(wrong_stage).ok());
}

}  // namespace
}  // namespace harp::schedule
