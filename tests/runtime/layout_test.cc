// Rank layouts come from the plan's device map: rank r runs the r-th smallest device id
// the plan uses, whatever the stage order; without devices, stage by stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "testutil/status.h"

#include "harp/runtime/comm/transport.h"

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

// The point-to-point channels, against an enumeration sample by sample: sample j of a
// microbatch lives on replica j / (mbs / dp) of each stage; a receiving tp rank r takes
// the cut tensor from the sending replica's tp rank r mod (the sender's tp).
TEST(Layout, LinksAreEveryPairThatSharesASample) {
  const int mbs = 4;
  const std::vector<int> dp = {2, 1, 2, 4}, tp = {1, 2, 2, 1};
  plan::Plan p;
  p.microbatch_size = mbs;
  int world = 0;
  for (size_t s = 0; s < dp.size(); ++s) {
    plan::Stage st;
    st.dp = dp[s];
    st.tp = tp[s];
    st.fwd_s = 1;
    p.stages.push_back(st);
    world += dp[s] * tp[s];
  }
  auto l = layout_for(p, world, 0);
  HARP_ASSERT_OK(l);
  std::set<std::pair<int, int>> want;
  for (int s = 0; s + 1 < static_cast<int>(dp.size()); ++s)
    for (int j = 0; j < mbs; ++j) {
      const int d = j / (mbs / dp[s]), e = j / (mbs / dp[s + 1]);
      for (int r = 0; r < tp[s + 1]; ++r) want.emplace(l->rank_of(s, d, r % tp[s]), l->rank_of(s + 1, e, r));  // forward
      for (int r = 0; r < tp[s]; ++r) want.emplace(l->rank_of(s + 1, e, r % tp[s + 1]), l->rank_of(s, d, r));  // backward
    }
  const auto links = l->links();
  const std::set<std::pair<int, int>> got(links.begin(), links.end());
  EXPECT_EQ(got, want);
  EXPECT_TRUE(std::is_sorted(links.begin(), links.end()));
  EXPECT_EQ(links.size(), want.size()) << "each pair once";
}

TEST(Layout, RefusesWhatCannotRun) {
  EXPECT_NE(layout_for(plan_with({{0}, {1}}), 3, 0).status().message().find("--nproc 2"), std::string::npos);
  EXPECT_NE(layout_for(plan_with({{0}, {0}}), 2, 0).status().message().find("appears twice"), std::string::npos);
}

}  // namespace
}  // namespace harp::runtime
