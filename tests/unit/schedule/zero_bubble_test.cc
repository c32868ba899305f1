// Zero-bubble schedules (schedule/zero_bubble.h): the split-backward IR, the paper's
// fixed-lag construction against its closed form, the list scheduler's candidates, and
// the validator's rules for I and W.
#include "harp/schedule/zero_bubble.h"

#include <gtest/gtest.h>

#include <random>

#include "harp/plan/closed_form.h"
#include "harp/schedule/generators.h"
#include "harp/schedule/lower_plan.h"
#include "harp/schedule/lowering.h"
#include "harp/schedule/validate.h"

namespace harp::schedule {
namespace {

using plan::ScheduleKind;

TEST(ZeroBubble, SplitActionsRoundTripAsText) {
  for (const char* text : {"2I5", "0W0", "13W7"}) {
    auto a = parse_action(text);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(to_string(*a), text);
    EXPECT_TRUE(a->is_compute());
  }
  EXPECT_TRUE(parse_action("2I5")->is_input_backward());
  EXPECT_FALSE(parse_action("2W5")->is_input_backward());
  EXPECT_FALSE(parse_action("2W").ok()) << "W needs a microbatch";
}

SplitTimes equal_times(int S, double f, double i, double w) {
  return {std::vector<double>(S, f), std::vector<double>(S, i), std::vector<double>(S, w), std::vector<double>(S, 0), {}, {}, {}};
}

// The paper's closed form on equal stages (Qi et al., §3): ZB-H1's bubble is
// (S−1)(F + I − W), on top of M(F + I + W) of work (1F1B's, (S−1)(F + I + W), is checked
// by the simulator's tests, tests/unit/sim/zero_bubble_sim_test.cc).
TEST(ZeroBubble, ZbH1MatchesThePapersBubbleOnEqualStages) {
  for (int S : {2, 3, 4, 6}) {
    for (int M : {S, 2 * S, 3 * S + 1}) {
      for (const auto& [f, i, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{2.0, 3.0, 1.0}, std::tuple{3.0, 2.0, 2.0}}) {
        SCOPED_TRACE("S " + std::to_string(S) + " M " + std::to_string(M) + " F/I/W " + std::to_string(f) + "/" +
                     std::to_string(i) + "/" + std::to_string(w));
        const SplitTimes t = equal_times(S, f, i, w);
        const auto n = plan::standard_launch_counts(S, M, ScheduleKind::kZbH1);
        auto h1 = generate_fixed_lag(S, M, n, zero_bubble_lags(n));
        ASSERT_TRUE(h1.ok()) << h1.status().to_string();
        EXPECT_TRUE(validate_compute(*h1).ok) << validate_compute(*h1).error;
        EXPECT_DOUBLE_EQ(*compute_makespan(*h1, t), M * (f + i + w) + (S - 1) * (f + i - w));
        // Lag 0 (each W right after its I) already sends the gradient before its W: the
        // bubble is (S−1)(F + I); 1F1B's own (with B whole) is in the simulator's tests.
        auto plain = generate_fixed_lag(S, M, n, std::vector<int>(S, 0));
        EXPECT_DOUBLE_EQ(*compute_makespan(*plain, t), M * (f + i + w) + (S - 1) * (f + i));
      }
    }
  }
}

// ZB-H1 holds what 1F1B's first stage holds, on every stage: N_0 microbatches whose W
// has not run; ZB-H2 twice that less one.
TEST(ZeroBubble, StagesHoldAtMostTheFirstStagesCount) {
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    const int S = 4, M = 12;
    const auto n = plan::standard_launch_counts(S, M, kind);
    auto s = generate_fixed_lag(S, M, n, zero_bubble_lags(n));
    ASSERT_TRUE(s.ok());
    for (int r = 0; r < S; ++r) {
      int held = 0, peak = 0;
      for (const Action& a : s->actions[r]) {
        held += a.kind == ActionKind::kF ? 1 : a.kind == ActionKind::kW ? -1 : 0;
        peak = std::max(peak, held);
      }
      EXPECT_EQ(peak, n[0]) << plan::schedule_kind_name(kind) << " rank " << r;
    }
  }
}

// Every construction lowers to lists that drain under strict (rendezvous) matching, on
// random unequal stage and link times.
TEST(ZeroBubble, EveryCandidateDrainsUnderStrictMatching) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int trial = 0; trial < 40; ++trial) {
    const int S = 2 + trial % 5, M = S + trial % 7;
    SplitTimes t;
    for (int r = 0; r < S; ++r) {
      t.f.push_back(u(rng));
      t.i.push_back(u(rng));
      t.w.push_back(u(rng));
      t.link.push_back(trial % 2 ? u(rng) : 0.0);
    }
    std::vector<int> n(S);
    for (int r = S - 1; r >= 0; --r) n[r] = std::min(M, (r == S - 1 ? 1 : n[r + 1]) + 1 + trial % 3 * (r % 2));
    for (WPolicy p : {WPolicy::kFillGaps, WPolicy::kFillFitting}) {
      auto zb = generate_zero_bubble(S, M, n, t, p);
      ASSERT_TRUE(zb.ok()) << zb.status().to_string();
      ASSERT_TRUE(validate_compute(zb->compute).ok) << validate_compute(zb->compute).error;
      // The generator's clock is the makespan of its own order.
      EXPECT_NEAR(zb->makespan, *compute_makespan(zb->compute, t), 1e-9);
      auto low = lower(zb->compute);
      ASSERT_TRUE(low.ok()) << low.status().to_string();
      const ValidationResult v = validate(*low, SendMode::kRendezvous);
      EXPECT_TRUE(v.ok) << "trial " << trial << ": " << v.error;
    }
    auto best = generate_best_zero_bubble(S, M, n, t);
    ASSERT_TRUE(best.ok());
    auto plain = generate_fixed_lag(S, M, n, std::vector<int>(S, 0));
    EXPECT_LE(best->makespan, *compute_makespan(*plain, t) + 1e-9) << "never slower than W right after I";
  }
}

TEST(ZeroBubble, LowerPlanMakesTheSplitKinds) {
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kHarpZb}) {
    auto low = lower_with_launch_counts(3, 6, {3, 2, 1}, kind);
    ASSERT_TRUE(low.ok()) << low.status().to_string();
    EXPECT_TRUE(low->check.ok) << low->check.error;
    int w = 0, b = 0;
    for (const auto& list : low->lowered.actions)
      for (const Action& a : list) w += a.kind == ActionKind::kW, b += a.kind == ActionKind::kB;
    EXPECT_EQ(w, 18) << plan::schedule_kind_name(kind);
    EXPECT_EQ(b, 0);
  }
}

ValidationResult check_text(const std::string& text) {
  auto s = parse_schedule_text(text);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return validate(*s);
}

TEST(ZeroBubble, ValidatorRejectsAWBeforeItsI) {
  const ValidationResult v = check_text(
      "rank 0: 0F0 0SEND_F0 0RECV_B0 0W0 0I0 0REDUCE_GRAD 0STEP\n"
      "rank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1W0 1REDUCE_GRAD 1STEP\n");
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.error.find("0I0"), std::string::npos) << v.error;
  EXPECT_NE(v.error.find("weight gradient needs its input gradient"), std::string::npos) << v.error;
  Schedule compute{1, 1, {{{0, ActionKind::kF, 0}, {0, ActionKind::kW, 0}, {0, ActionKind::kI, 0}}}};
  EXPECT_FALSE(validate_compute(compute).ok);
  EXPECT_FALSE(lower(compute).ok()) << "lowering cannot place a W before its I";
}

TEST(ZeroBubble, ValidatorRejectsBAndASplitBackwardTogether) {
  const ValidationResult v = check_text(
      "rank 0: 0F0 0I0 0B0 0W0 0REDUCE_GRAD 0STEP\n");
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.error.find("both"), std::string::npos) << v.error;
  EXPECT_FALSE(check_text("rank 0: 0F0 0I0 0REDUCE_GRAD 0STEP\n").ok) << "an I without its W";
  EXPECT_FALSE(check_text("rank 0: 0F0 0I0 0W0 0STEP 0REDUCE_GRAD\n").ok);
  EXPECT_FALSE(check_text("rank 0: 0F0 0I0 0REDUCE_GRAD 0W0 0STEP\n").ok) << "REDUCE_GRAD after the last W";
  EXPECT_TRUE(check_text("rank 0: 0F0 0I0 0W0 0REDUCE_GRAD 0STEP\n").ok);
}

// Rank 0 waits for the gradient of microbatch 0 before sending microbatch 1, which rank 1
// needs before its I: a cycle under rendezvous (blocking sends and receives).
TEST(ZeroBubble, ValidatorFindsASplitScheduleThatDeadlocks) {
  const ValidationResult v = check_text(
      "rank 0: 0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0I0 0W0 0RECV_B1 0I1 0W1 0REDUCE_GRAD 0STEP\n"
      "rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1I0 1SEND_B0 1I1 1SEND_B1 1W0 1W1 1REDUCE_GRAD 1STEP\n");
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.error.find("deadlock"), std::string::npos) << v.error;
}

}  // namespace
}  // namespace harp::schedule
