// Link behaviour checked against timelines worked out by hand: transfers queue FIFO on
// their direction, occupy it for comm − latency, arrive latency later, and the two
// directions of a boundary are independent (full duplex).
#include <gtest/gtest.h>

#include "sim_test_util.h"

namespace harp::sim {
namespace {

using schedule::ActionKind;
using testing::find_span;

// Two stages, f = b = 100 ns, one link with comm_s = 1000 ns of which 200 ns latency:
// each transfer holds its direction for 800 ns and lands 200 ns after releasing it.
plan::Plan two_stage_plan(int microbatches) {
  plan::Plan p = testing::equal_plan(2, microbatches, 100, 100, 1000);
  p.stages[0].comm_latency_s = testing::ns(200);
  return p;
}

void expect_transfer(const SimResult& r, int rank, ActionKind kind, int mb, Nanos issued,
                     Nanos link_start, Nanos link_end, Nanos arrive) {
  const Span& s = find_span(r, rank, kind, mb);
  SCOPED_TRACE(schedule::to_string(s.action));
  EXPECT_EQ(s.start_ns, issued);
  EXPECT_EQ(s.end_ns, issued);  // asynchronous: no time on the sender
  EXPECT_EQ(s.link_start_ns, link_start);
  EXPECT_EQ(s.link_end_ns, link_end);
  EXPECT_EQ(s.arrive_ns, arrive);
}

void expect_compute(const SimResult& r, int rank, ActionKind kind, int mb, Nanos start) {
  const Span& s = find_span(r, rank, kind, mb);
  EXPECT_EQ(s.start_ns, start) << schedule::to_string(s.action);
  EXPECT_EQ(s.end_ns, start + 100) << schedule::to_string(s.action);
}

// GPipe, M = 3. Stage 0 issues its sends at 100, 200, 300 but the forward link is busy
// for 800 ns per transfer, so they occupy [100,900], [900,1700], [1700,2500] and land
// at 1100, 1900, 2700. Stage 1 runs F0 F1 F2 at those times, then B0 B1 B2 at 2800,
// 2900, 3000; its gradient sends queue the same way: [2900,3700], [3700,4500],
// [4500,5300], landing at 3900, 4700, 5500. Stage 0 runs B2 at 5500: iteration 5600.
TEST(LinkTest, TransfersQueueFifoOnTheirDirection) {
  const SimResult r = testing::simulate_ok(two_stage_plan(3), testing::lowered(2, 3, {3, 3}));
  expect_transfer(r, 0, ActionKind::kSendF, 0, 100, 100, 900, 1100);
  expect_transfer(r, 0, ActionKind::kSendF, 1, 200, 900, 1700, 1900);
  expect_transfer(r, 0, ActionKind::kSendF, 2, 300, 1700, 2500, 2700);
  expect_compute(r, 1, ActionKind::kF, 0, 1100);
  expect_compute(r, 1, ActionKind::kF, 1, 1900);
  expect_compute(r, 1, ActionKind::kF, 2, 2700);
  expect_compute(r, 1, ActionKind::kB, 0, 2800);
  expect_transfer(r, 1, ActionKind::kSendB, 0, 2900, 2900, 3700, 3900);
  expect_transfer(r, 1, ActionKind::kSendB, 1, 3000, 3700, 4500, 4700);
  expect_transfer(r, 1, ActionKind::kSendB, 2, 3100, 4500, 5300, 5500);
  expect_compute(r, 0, ActionKind::kB, 0, 3900);
  expect_compute(r, 0, ActionKind::kB, 1, 4700);
  expect_compute(r, 0, ActionKind::kB, 2, 5500);
  // Then the step's two all-ranks reductions, 2 (S − 1) × 200 ns of latency each.
  const Nanos sync = s_to_ns(step_sync_s(two_stage_plan(3)));
  EXPECT_EQ(sync, 400);
  EXPECT_EQ(r.iteration_ns, 5600 + 2 * sync);
  // The receive spans carry the arrival of their data.
  EXPECT_EQ(find_span(r, 1, ActionKind::kRecvF, 2).arrive_ns, 2700);
}

// 1F1B (N = [2, 1]), M = 3.
//   stage 0: F0 [0,100]  SEND_F0 link [100,900]   -> 1100
//            F1 [100,200] SEND_F1 queues: [900,1700] -> 1900
//   stage 1: F0 [1100,1200] B0 [1200,1300] SEND_B0 [1300,2100] -> 2300
//            F1 [1900,2000] B1 [2000,2100] SEND_B1 [2100,2900] -> 3100
//   stage 0: B0 [2300,2400] F2 [2400,2500] SEND_F2 [2500,3300] -> 3500
//            B1 [3100,3200]
//   stage 1: F2 [3500,3600] B2 [3600,3700] SEND_B2 [3700,4500] -> 4700
//   stage 0: B2 [4700,4800]                                 iteration 4800
// SEND_F2 holds the forward direction during [2500,3300] while SEND_B1 holds the
// backward one during [2100,2900]: the directions do not wait for each other.
TEST(LinkTest, DirectionsAreFullDuplex) {
  const SimResult r = testing::simulate_ok(two_stage_plan(3), testing::lowered(2, 3, {2, 1}));
  expect_transfer(r, 0, ActionKind::kSendF, 0, 100, 100, 900, 1100);
  expect_transfer(r, 0, ActionKind::kSendF, 1, 200, 900, 1700, 1900);
  expect_transfer(r, 1, ActionKind::kSendB, 0, 1300, 1300, 2100, 2300);
  expect_transfer(r, 1, ActionKind::kSendB, 1, 2100, 2100, 2900, 3100);
  expect_transfer(r, 0, ActionKind::kSendF, 2, 2500, 2500, 3300, 3500);
  expect_transfer(r, 1, ActionKind::kSendB, 2, 3700, 3700, 4500, 4700);
  expect_compute(r, 0, ActionKind::kB, 0, 2300);
  expect_compute(r, 0, ActionKind::kF, 2, 2400);
  expect_compute(r, 0, ActionKind::kB, 1, 3100);
  expect_compute(r, 1, ActionKind::kF, 2, 3500);
  expect_compute(r, 0, ActionKind::kB, 2, 4700);
  const Nanos sync = s_to_ns(step_sync_s(two_stage_plan(3)));  // 400: see above
  EXPECT_EQ(r.iteration_ns, 4800 + 2 * sync);
  // Its last action, STEP, waits from the SEND_B2 at 3700 for stage 0 (4800) and the
  // reduction.
  EXPECT_EQ(find_span(r, 1, ActionKind::kStep, -1).start_ns, 3700);
  EXPECT_EQ(r.ranks[1].finish_ns, 4800 + sync);
}

// A link whose transfers are all latency (bandwidth term zero) never queues.
TEST(LinkTest, PureLatencyDoesNotQueue) {
  plan::Plan p = testing::equal_plan(2, 3, 100, 100, 1000);
  p.stages[0].comm_latency_s = testing::ns(1000);
  const SimResult r = testing::simulate_ok(p, testing::lowered(2, 3, {3, 3}));
  expect_transfer(r, 0, ActionKind::kSendF, 1, 200, 200, 200, 1200);
  expect_transfer(r, 0, ActionKind::kSendF, 2, 300, 300, 300, 1300);
}

}  // namespace
}  // namespace harp::sim
