// Simulator anchors with hand-derived answers (STYLE habit 12): equal stages without
// communication, peak in-flight and memory, bad input and schedules that cannot drain.
#include "harp/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "harp/plan/closed_form.h"
#include "sim_test_util.h"

namespace harp::sim {
namespace {

using schedule::Action;
using schedule::ActionKind;
using testing::equal_plan;
using testing::lowered;
using testing::simulate_ok;

constexpr Nanos kF = 3000, kB = 5000;  // f = 3 µs, b = 5 µs

// P equal stages, free communication, M microbatches: every schedule of the family
// (GPipe, 1F1B, anything in between) finishes in (M + P − 1)(f + b): stage P−1 is
// busy for M(f + b) and cannot start before P−1 forwards nor end before P−1
// backwards after it, and none of these schedules leaves it idle in between.
class EqualStagesTest : public ::testing::TestWithParam<int> {};

TEST_P(EqualStagesTest, GpipeAnd1F1BTakeMPlusPMinus1Rounds) {
  const int P = GetParam();
  for (int M = 1; M <= 32; ++M) {
    const plan::Plan plan = equal_plan(P, M, kF, kB);
    const Nanos expected = (M + P - 1) * (kF + kB);
    const double bubble = static_cast<double>(P - 1) / (M + P - 1);
    std::vector<int> harp_like(P);
    for (int i = 0; i < P; ++i) harp_like[i] = std::min(M, 2 * (P - i) - 1);
    for (auto kind : {plan::ScheduleKind::kGpipe, plan::ScheduleKind::k1F1B}) {
      const auto n = plan::standard_launch_counts(P, M, kind);
      const SimResult r = simulate_ok(plan, lowered(P, M, n), false);
      SCOPED_TRACE(std::string(plan::schedule_kind_name(kind)) + " P=" + std::to_string(P) +
                   " M=" + std::to_string(M));
      EXPECT_EQ(r.iteration_ns, expected);
      EXPECT_NEAR(r.bubble_fraction, bubble, 1e-12);
      EXPECT_EQ(r.ranks[0].finish_ns, expected);  // stage 0 runs the last backward
      for (const RankStats& s : r.ranks) {
        EXPECT_EQ(s.compute_ns, M * (kF + kB));
        EXPECT_EQ(s.busy_ns, s.compute_ns);  // REDUCE_GRAD and STEP take 0 here
      }
    }
    // Larger launch counts only add warm-up forwards; with free links the makespan
    // stays the same.
    EXPECT_EQ(testing::iteration_ns(plan, harp_like), expected) << "P=" << P << " M=" << M;
  }
}

INSTANTIATE_TEST_SUITE_P(Stages1To8, EqualStagesTest, ::testing::Range(1, 9));

TEST(SimulatorTest, ActionCountAndEndOfStepTerms) {
  plan::Plan plan = equal_plan(3, 4, kF, kB);
  for (auto& s : plan.stages) {
    s.allreduce_s = testing::ns(700);
    s.optimizer_s = testing::ns(300);
  }
  const schedule::Schedule s = lowered(3, 4, {3, 2, 1});
  const SimResult r = simulate_ok(plan, s);
  EXPECT_EQ(r.actions_executed, s.total_actions());
  EXPECT_EQ(r.spans.size(), s.total_actions());
  // REDUCE_GRAD and STEP follow stage 0's last backward; the others wait for it at STEP.
  EXPECT_EQ(r.iteration_ns, (4 + 3 - 1) * (kF + kB) + 700 + 300);
  for (const RankStats& st : r.ranks) EXPECT_EQ(st.busy_ns, st.compute_ns + 1000);
}

// The step's end as the runtime runs it: STEP waits until every rank has reached it
// (the all-ranks reduction of the gradient norm), plus one small reduction's time, then
// each rank steps; the iteration ends one more reduction after the last rank. Held
// against that closed form, read off the spans: reach_r = STEP's start on rank r.
TEST(SimulatorTest, StepWaitsForEveryRankAndTheReductionsCostTheirLatency) {
  for (const std::int64_t latency : {0, 40000}) {
    plan::Plan plan = equal_plan(3, 4, kF, kB);
    const std::int64_t allreduce[] = {700, 0, 0}, optimizer[] = {100, 200, 900};
    for (int i = 0; i < 3; ++i) {
      plan.stages[i].allreduce_s = testing::ns(allreduce[i]);
      plan.stages[i].optimizer_s = testing::ns(optimizer[i]);
      if (i < 2) plan.stages[i].comm_s = plan.stages[i].comm_latency_s = testing::ns(latency);
    }
    const Nanos sync = 2 * (3 - 1) * latency;
    EXPECT_EQ(s_to_ns(step_sync_s(plan)), sync);
    const SimResult r = simulate_ok(plan, lowered(3, 4, {3, 2, 1}));
    Nanos last_reach = 0;
    for (int rank = 0; rank < 3; ++rank) last_reach = std::max(last_reach, testing::find_span(r, rank, ActionKind::kStep, -1).start_ns);
    Nanos last_end = 0;
    for (int rank = 0; rank < 3; ++rank) {
      const Span& step = testing::find_span(r, rank, ActionKind::kStep, -1);
      const Span& reduce = testing::find_span(r, rank, ActionKind::kReduceGrad, -1);
      EXPECT_EQ(step.start_ns, reduce.end_ns) << "rank " << rank;  // the span starts where the rank reached it
      EXPECT_EQ(step.end_ns, last_reach + sync + optimizer[rank]) << "rank " << rank;
      EXPECT_EQ(r.ranks[rank].busy_ns, r.ranks[rank].compute_ns + allreduce[rank] + optimizer[rank]);
      last_end = std::max(last_end, step.end_ns);
    }
    // Stage 0 runs the last backward and has the all-reduce: it reaches STEP last.
    EXPECT_EQ(last_reach, testing::find_span(r, 0, ActionKind::kReduceGrad, -1).end_ns);
    EXPECT_EQ(r.iteration_ns, last_end + sync);
    if (latency == 0) {
      EXPECT_EQ(r.iteration_ns, (4 + 3 - 1) * (kF + kB) + 700 + 900);
    }
  }
}

TEST(SimulatorTest, PeakInflightIsTheLaunchCountAndSetsMemory) {
  const std::vector<int> launch = {7, 4, 2, 1};
  for (int M : {1, 3, 5, 16}) {
    plan::Plan plan = equal_plan(4, M, kF, kB, 400);
    for (int i = 0; i < 4; ++i) {
      plan.stages[i].memory_static_bytes = 1000.0 * (i + 1);
      plan.stages[i].activation_bytes = 64.0 + i;
    }
    std::vector<int> n(4);
    for (int i = 0; i < 4; ++i) n[i] = std::min(launch[i], M);
    const SimResult r = simulate_ok(plan, lowered(4, M, n), false);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(r.ranks[i].peak_inflight, std::min(launch[i], M)) << "M=" << M << " i=" << i;
      EXPECT_DOUBLE_EQ(r.ranks[i].peak_memory_bytes,
                       1000.0 * (i + 1) + std::min(launch[i], M) * (64.0 + i));
    }
  }
  // GPipe keeps every microbatch; 1F1B keeps S − i.
  const plan::Plan plan = equal_plan(4, 8, kF, kB);
  const SimResult gpipe = simulate_ok(plan, lowered(4, 8, {8, 8, 8, 8}), false);
  const SimResult one_f = simulate_ok(plan, lowered(4, 8, {4, 3, 2, 1}), false);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(gpipe.ranks[i].peak_inflight, 8);
    EXPECT_EQ(one_f.ranks[i].peak_inflight, 4 - i);
  }
}

TEST(SimulatorTest, IsDeterministic) {
  plan::Plan plan = equal_plan(5, 12, 1000, 2100, 350);
  plan.stages[2].fwd_s = testing::ns(1700);
  plan.stages[1].comm_latency_s = testing::ns(100);
  const schedule::Schedule s = lowered(5, 12, {8, 6, 4, 3, 1});
  const SimResult a = simulate_ok(plan, s), b = simulate_ok(plan, s);
  ASSERT_EQ(a.spans.size(), b.spans.size());
  for (size_t k = 0; k < a.spans.size(); ++k) {
    EXPECT_EQ(a.spans[k].action, b.spans[k].action);
    EXPECT_EQ(a.spans[k].start_ns, b.spans[k].start_ns);
    EXPECT_EQ(a.spans[k].arrive_ns, b.spans[k].arrive_ns);
  }
  EXPECT_EQ(a.iteration_ns, b.iteration_ns);
}

TEST(SimulatorTest, SingleStageNeedsNoCommunication) {
  const plan::Plan plan = equal_plan(1, 5, kF, kB);
  schedule::Schedule compute = schedule::generate_1f1b(1, 5);  // no lowering needed
  EXPECT_EQ(simulate_ok(plan, compute).iteration_ns, 5 * (kF + kB));
}

TEST(SimulatorTest, RejectsStageCountMismatch) {
  const plan::Plan plan = equal_plan(3, 4, kF, kB);
  auto r = simulate(plan, lowered(2, 4, {2, 1}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("3"), std::string::npos) << r.status().message();
}

TEST(SimulatorTest, RejectsBadTimes) {
  plan::Plan plan = equal_plan(2, 2, kF, kB, 100);
  plan.stages[0].comm_latency_s = testing::ns(200);  // more than comm_s
  auto r = simulate(plan, lowered(2, 2, {2, 1}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("comm_latency_s"), std::string::npos);

  plan = equal_plan(2, 2, kF, kB);
  plan.stages[1].bwd_s = -1;
  r = simulate(plan, lowered(2, 2, {2, 1}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stages[1].bwd_s"), std::string::npos);
}

TEST(SimulatorTest, RejectsTimesThatWouldOverflowNanoseconds) {
  const plan::Plan plan = equal_plan(1, 3, 900'000'000'000'000'000, 900'000'000'000'000'000);
  auto r = simulate(plan, schedule::generate_1f1b(1, 3));  // 3 × 1.8e18 ns of work
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("4e18 ns"), std::string::npos) << r.status().message();
}

// The simulator costs what it is given; completeness is the validator's job. A list
// missing its last backward still simulates (and keeps one microbatch in flight).
TEST(SimulatorTest, ASingleStageListThatStopsEarlySimulates) {
  schedule::Schedule s = schedule::generate_1f1b(1, 3);
  s.actions[0].pop_back();
  const SimResult r = simulate_ok(equal_plan(1, 3, kF, kB), s);
  EXPECT_EQ(r.iteration_ns, 3 * kF + 2 * kB);
  EXPECT_EQ(r.ranks[0].peak_inflight, 1);
}

TEST(SimulatorTest, RejectsAComputeOnlySchedule) {
  const plan::Plan plan = equal_plan(2, 2, kF, kB);
  auto r = simulate(plan, schedule::generate_1f1b(2, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("lower"), std::string::npos) << r.status().message();
}

TEST(SimulatorTest, ReportsStuckRanks) {
  // Rank 1 runs microbatch 1 first, which rank 0 only sends after B0, which needs
  // rank 1's B0: a cycle. Every action is well-formed on its own.
  schedule::Schedule s;
  s.num_stages = 2;
  s.num_microbatches = 2;
  auto A = [](int st, ActionKind k, int m) { return Action{st, k, m}; };
  s.actions = {
      {A(0, ActionKind::kF, 0), A(0, ActionKind::kSendF, 0), A(0, ActionKind::kRecvB, 0),
       A(0, ActionKind::kB, 0), A(0, ActionKind::kF, 1), A(0, ActionKind::kSendF, 1),
       A(0, ActionKind::kRecvB, 1), A(0, ActionKind::kB, 1)},
      {A(1, ActionKind::kRecvF, 0), A(1, ActionKind::kRecvF, 1), A(1, ActionKind::kF, 1),
       A(1, ActionKind::kB, 1), A(1, ActionKind::kSendB, 1), A(1, ActionKind::kF, 0),
       A(1, ActionKind::kB, 0), A(1, ActionKind::kSendB, 0)}};
  auto r = simulate(equal_plan(2, 2, kF, kB), s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("rank 0 waits at action 3 (0B0)"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1 waits at action 2 (1F1)"), std::string::npos) << m;
}

TEST(SimulatorTest, RejectsASendBeforeItsCompute) {
  schedule::Schedule s = lowered(2, 1, {1, 1});
  // Rank 0's list is F0 SEND_F0 RECV_B0 B0 ...; swap the first two.
  std::swap(s.actions[0][0], s.actions[0][1]);
  auto r = simulate(equal_plan(2, 1, kF, kB), s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("0SEND_F0"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace harp::sim
