// Rank layouts come from the plan's device map: rank r runs the r-th smallest device id
// the plan uses, whatever the stage order; without devices, stage by stage.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include "harp/runtime/transport.h"

namespace harp::runtime {
namespace {

plan::Plan plan_with(const std::vector<std::vector<int>>& devices, int microbatch_size = 2) {
  plan::Plan p;
  p.microbatch_size = microbatch_size;
  for (const auto& d : devices) {
    plan::Stage s;
    s.dp = static_cast<int>(d.size());
    s.devices = d;
    s.fwd_s = 1;
    p.stages.push_back(s);
  }
  return p;
}

TEST(Layout, RanksFollowTheDeviceIds) {
  // Stage 0 on devices 6-7, stage 1 on devices 2-3 (the planner gives the tail-most stage
  // of a subcluster the highest ids; other subclusters can come first in id order).
  plan::Plan p = plan_with({{6, 7}, {2, 3}});
  auto l = layout_for(p, 4, 0);
  HARP_ASSERT_OK(l);
  EXPECT_EQ(l->stage_ranks, (std::vector<std::vector<int>>{{2, 3}, {0, 1}}));
  EXPECT_EQ(l->rank_device, (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(l->stage, 1);
  EXPECT_EQ(layout_for(p, 4, 3)->stage, 0);
  EXPECT_EQ(layout_for(p, 4, 3)->dp_rank, 1);
}

TEST(Layout, IdleDevicesGetNoRank) {
  plan::Plan p = plan_with({{1}, {4, 5}});  // devices 0, 2, 3 idle
  auto l = layout_for(p, 3, 0);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->stage_ranks, (std::vector<std::vector<int>>{{0}, {1, 2}}));
}

TEST(Layout, WithoutDevicesStageByStage) {
  plan::Plan p = plan_with({{}, {}});
  p.stages[0].dp = 1;
  p.stages[1].dp = 2;
  auto l = layout_for(p, 3, 2);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->stage_ranks, (std::vector<std::vector<int>>{{0}, {1, 2}}));
  EXPECT_EQ(l->rank_device, (std::vector<int>{-1, -1, -1}));
}

TEST(Layout, RefusesWhatCannotRun) {
  EXPECT_NE(layout_for(plan_with({{0}, {1}}), 3, 0).status().message().find("--nproc 2"), std::string::npos);
  EXPECT_NE(layout_for(plan_with({{0}, {0}}), 2, 0).status().message().find("appears twice"), std::string::npos);
}

}  // namespace
}  // namespace harp::runtime
