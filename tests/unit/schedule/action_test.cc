// Text form of actions and schedules: every kind round-trips, bad tokens are named.
#include "harp/schedule/action.h"

#include <gtest/gtest.h>

#include "testutil/status.h"

namespace harp::schedule {
namespace {

struct KindCase {
  Action action;
  const char* text;
};

const KindCase kEveryKind[] = {
    {{2, ActionKind::kF, 5}, "2F5"},
    {{2, ActionKind::kB, 5}, "2B5"},
    {{2, ActionKind::kSendF, 5}, "2SEND_F5"},
    {{3, ActionKind::kRecvF, 5}, "3RECV_F5"},
    {{2, ActionKind::kSendB, 5}, "2SEND_B5"},
    {{1, ActionKind::kRecvB, 5}, "1RECV_B5"},
    {{2, ActionKind::kReduceGrad, -1}, "2REDUCE_GRAD"},
    {{2, ActionKind::kStep, -1}, "2STEP"},
    {{12, ActionKind::kF, 103}, "12F103"},
    {{0, ActionKind::kB, 0}, "0B0"},
};

TEST(ActionText, EveryKindRoundTrips) {
  for (const KindCase& c : kEveryKind) {
    EXPECT_EQ(to_string(c.action), c.text);
    StatusOr<Action> parsed = parse_action(c.text);
    ASSERT_TRUE(parsed.ok()) << c.text << ": " << parsed.status().to_string();
    EXPECT_EQ(*parsed, c.action) << c.text;
  }
}

TEST(ActionText, KindNames) {
  EXPECT_STREQ(action_kind_name(ActionKind::kF), "F");
  EXPECT_STREQ(action_kind_name(ActionKind::kRecvB), "RECV_B");
  EXPECT_STREQ(action_kind_name(ActionKind::kReduceGrad), "REDUCE_GRAD");
  EXPECT_STREQ(action_kind_name(ActionKind::kStep), "STEP");
}

TEST(ActionText, BadTokensAreNamed) {
  for (const char* bad : {"", "F5", "2X5", "2F", "2SEND5", "2REDUCE_GRAD3", "2STEP0", "2F5x",
                          "-1F0", "2f5", "2SEND_F", "x"}) {
    StatusOr<Action> parsed = parse_action(bad);
    ASSERT_FALSE(parsed.ok()) << "accepted \"" << bad << "\"";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(std::string("\"") + bad + "\""), std::string::npos)
        << parsed.status().message();
  }
}

TEST(ScheduleText, WholeScheduleRoundTrips) {
  const std::string text =
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0REDUCE_GRAD 0STEP\n"
      "rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 1REDUCE_GRAD 1STEP\n";
  StatusOr<Schedule> s = parse_schedule_text(text);
  HARP_ASSERT_OK(s);
  EXPECT_EQ(s->num_stages, 2);
  EXPECT_EQ(s->num_microbatches, 2);
  EXPECT_EQ(s->total_actions(), 20u);
  EXPECT_EQ(s->actions[1][3], (Action{1, ActionKind::kB, 0}));
  EXPECT_EQ(schedule_to_text(*s), text);
}

TEST(ScheduleText, BuiltScheduleRoundTrips) {
  Schedule s;
  s.num_stages = 2;
  s.num_microbatches = 3;
  s.actions = {{{0, ActionKind::kF, 0}, {0, ActionKind::kF, 2}, {0, ActionKind::kB, 1}},
               {{1, ActionKind::kStep, -1}}};
  const std::string text = schedule_to_text(s);
  EXPECT_EQ(text, "rank 0: 0F0 0F2 0B1\nrank 1: 1STEP\n");
  StatusOr<Schedule> back = parse_schedule_text(text);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->actions, s.actions);
  EXPECT_EQ(back->num_microbatches, 3);
}

TEST(ScheduleText, EmptyRankAndBlankLines) {
  StatusOr<Schedule> s = parse_schedule_text("\nrank 0:\n\nrank 1: 1F0\n");
  HARP_ASSERT_OK(s);
  EXPECT_EQ(s->num_stages, 2);
  EXPECT_TRUE(s->actions[0].empty());
  EXPECT_EQ(schedule_to_text(*s), "rank 0:\nrank 1: 1F0\n");
}

TEST(ScheduleText, ErrorsNameLineAndToken) {
  StatusOr<Schedule> bad_token = parse_schedule_text("rank 0: 0F0\nrank 1: 1F0 1Q1\n");
  ASSERT_FALSE(bad_token.ok());
  EXPECT_EQ(bad_token.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_token.status().message().find("line 2"), std::string::npos);
  EXPECT_NE(bad_token.status().message().find("\"1Q1\""), std::string::npos);

  StatusOr<Schedule> skipped_rank = parse_schedule_text("rank 1: 1F0\n");
  ASSERT_FALSE(skipped_rank.ok());
  EXPECT_NE(skipped_rank.status().message().find("rank 0"), std::string::npos);

  EXPECT_FALSE(parse_schedule_text("0F0 0B0\n").ok());
}

}  // namespace
}  // namespace harp::schedule
