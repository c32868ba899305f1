// The shared timeline: written and read back unchanged, per-stage figures by hand, and
// the comparison's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "testutil/status.h"

#include "harp/schedule/timeline.h"

namespace harp::schedule {
namespace {

// Two ranks, one step. Rank 0: F0 [0, 10], F1 [10, 20], B0 [40, 60], STEP [60, 62].
// Rank 1: F0 [15, 25] (waited 15 for its input), B0 [25, 45], STEP [62, 64].
Timeline two_ranks(double scale = 1) {
  Timeline t;
  t.rows = {{0, 0, row_name(0, "v100", 0, 1)}, {1, 1, row_name(1, "a100", 0, 1)}};
  auto add = [&](int rank, ActionKind kind, int mb, double start, double end, Lane lane = Lane::kCompute) {
    TimelineEvent e;
    e.rank = rank;
    e.action = Action{rank, kind, mb};
    e.lane = lane;
    e.start_us = start * scale;
    e.dur_us = (end - start) * scale;
    t.events.push_back(e);
  };
  add(0, ActionKind::kF, 0, 0, 10);
  add(0, ActionKind::kF, 1, 10, 20);
  add(0, ActionKind::kSendF, 0, 10, 14, Lane::kSend);
  add(0, ActionKind::kB, 0, 40, 60);
  add(0, ActionKind::kStep, -1, 60, 62);
  add(1, ActionKind::kF, 0, 15, 25);
  add(1, ActionKind::kB, 0, 25, 45);
  add(1, ActionKind::kStep, -1, 62, 64);
  t.events[2].peer = 1;
  return t;
}

TEST(Timeline, WrittenAndReadBack) {
  const Timeline t = two_ranks();
  const Json trace = chrome_trace(t);
  auto back = timeline_from_trace(trace, "t.json");
  HARP_ASSERT_OK(back);
  ASSERT_EQ(back->rows.size(), 2u);
  EXPECT_EQ(back->rows[1].name, "stage 1 (a100)");
  EXPECT_EQ(back->events.size(), t.events.size());
  EXPECT_EQ(chrome_trace(*back), trace);  // the same bytes again
}

TEST(Timeline, FiguresByHand) {
  TimelineFigures f = timeline_figures(two_ranks());
  EXPECT_EQ(f.steps, 1);
  EXPECT_DOUBLE_EQ(f.iteration_s, 64e-6);
  ASSERT_EQ(f.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(f.stages[0].compute_s, 40e-6);
  EXPECT_DOUBLE_EQ(f.stages[0].wait_s, 20e-6);  // between F1 and B0
  EXPECT_DOUBLE_EQ(f.stages[0].end_s, 2e-6);
  EXPECT_DOUBLE_EQ(f.stages[0].idle_s, 22e-6);
  EXPECT_DOUBLE_EQ(f.stages[1].wait_s, 15e-6);  // before F0
}

TEST(Timeline, ComparisonErrors) {
  auto cmp = compare_timelines(timeline_figures(two_ranks()), timeline_figures(two_ranks(1.5)));
  ASSERT_TRUE(cmp.ok());
  EXPECT_NEAR((*cmp)["iteration"]["error"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR((*cmp)["stages"][1]["compute"]["error"].get<double>(), 0.5, 1e-12);
  Timeline one = two_ranks();
  one.rows.pop_back();
  for (auto& e : one.events) e.rank = 0, e.action.stage = 0;
  EXPECT_FALSE(compare_timelines(timeline_figures(one), timeline_figures(two_ranks())).ok());
}

// A predicted trace's computes carry their fixed cost per call; it is read back and
// summed per stage as its own figure, which a measured trace does not have.
TEST(Timeline, TheFixedCostPerCallIsItsOwnSlice) {
  Timeline predicted = two_ranks();
  for (auto& e : predicted.events)
    if (e.action.is_compute()) e.fixed_us = e.action.kind == ActionKind::kF ? 1.0 : (e.rank == 0 ? 3.0 : -2.0);
  auto back = timeline_from_trace(chrome_trace(predicted), "p.json");
  HARP_ASSERT_OK(back);
  const TimelineFigures f = timeline_figures(*back);
  EXPECT_DOUBLE_EQ(f.stages[0].fixed_s, 5e-6);   // F0, F1, B0
  EXPECT_DOUBLE_EQ(f.stages[1].fixed_s, -1e-6);  // a range slower than its layers: negative
  EXPECT_TRUE(std::isnan(timeline_figures(two_ranks()).stages[0].fixed_s));
  auto cmp = compare_timelines(f, timeline_figures(two_ranks()));
  HARP_ASSERT_OK(cmp);
  EXPECT_DOUBLE_EQ((*cmp)["stages"][0]["fixed"]["predicted_s"].get<double>(), 5e-6);
  auto none = compare_timelines(timeline_figures(two_ranks()), f);
  HARP_ASSERT_OK(none);
  EXPECT_TRUE((*none)["stages"][0]["fixed"]["predicted_s"].is_null());
}

TEST(Timeline, NotATraceNamesTheFile) {
  auto r = timeline_from_trace(Json{{"x", 1}}, "plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("plan.json"), std::string::npos);
  Json bad = chrome_trace(two_ranks());
  bad["traceEvents"].push_back({{"ph", "X"}, {"pid", 0}, {"name", "WHAT"}, {"ts", 1}, {"dur", 1}, {"args", Json::object()}});
  r = timeline_from_trace(bad, "t.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("WHAT"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace harp::schedule
