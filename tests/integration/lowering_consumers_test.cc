// Every consumer of a plan's schedule gets the same lowered lists: the simulator
// executes exactly schedule::lower_plan's per-rank lists, in order, and `harp schedule
// show --lowered` prints them (the runtime's side is in tests/runtime_dist). Several
// plans and every schedule kind.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include <string>
#include <vector>

#include "harp/plan/closed_form.h"
#include "harp/schedule/lower_plan.h"
#include "harp/sim/run.h"
#include "testutil/run_harp.h"

namespace harp {
namespace {

plan::Plan make(int stages, int microbatches, std::vector<double> comm_s) {
  plan::Plan p;
  p.microbatches = microbatches;
  p.schedule = plan::ScheduleKind::kHarp1F1B;
  for (int i = 0; i < stages; ++i) {
    plan::Stage s;
    s.fwd_s = 0.001 * (1 + i % 3);
    s.bwd_s = 2 * s.fwd_s;
    s.comm_s = i + 1 < stages ? comm_s[i % comm_s.size()] : 0;
    s.crosses_nodes = true;
    s.allreduce_s = 0.0005;
    p.stages.push_back(s);
  }
  p.predicted = plan::closed_form(p);
  return p;
}

std::string text(const std::vector<schedule::Action>& actions) {
  std::string s;
  for (const auto& a : actions) s += schedule::to_string(a) + " ";
  return s;
}

TEST(LoweringConsumers, SimulatorAndScheduleShowSeeTheSameLists) {
  const std::vector<plan::Plan> plans = {make(2, 4, {0.0001}), make(3, 8, {0.004, 0.0001}),
                                         make(4, 6, {0.002}), make(5, 16, {0.0005, 0.006})};
  for (const plan::Plan& p : plans)
    for (plan::ScheduleKind kind : {plan::ScheduleKind::kGpipe, plan::ScheduleKind::k1F1B,
                                    plan::ScheduleKind::kHarp1F1B}) {
      SCOPED_TRACE(std::to_string(p.num_stages()) + " stages, " + plan::schedule_kind_name(kind));
      auto lowered = schedule::lower_plan(p, kind);
      HARP_ASSERT_OK(lowered);
      ASSERT_TRUE(lowered->check.ok) << lowered->check.error;

      // The simulator: per rank, the actions it executed in the order it executed them.
      auto run = sim::simulate_plan(p, kind, {true});
      HARP_ASSERT_OK(run);
      EXPECT_EQ(run->launch_counts, lowered->launch_counts);
      std::vector<std::vector<schedule::Action>> executed(p.num_stages());
      for (const auto& span : run->result.spans) executed[span.rank].push_back(span.action);
      for (int r = 0; r < p.num_stages(); ++r) EXPECT_EQ(text(executed[r]), text(lowered->lowered.actions[r])) << "rank " << r;

      // `harp schedule show --lowered` with the same launch counts prints the same lists.
      std::string counts;
      for (size_t i = 0; i < lowered->launch_counts.size(); ++i)
        counts += (i ? "," : "") + std::to_string(lowered->launch_counts[i]);
      auto shown = testing::run_harp({"schedule", "show", "--stages", std::to_string(p.num_stages()),
                                      "--microbatches", std::to_string(p.microbatches), "--kind",
                                      plan::schedule_kind_name(kind), "--launch-counts", counts, "--lowered"});
      ASSERT_EQ(shown.rc, 0) << shown.err;
      EXPECT_NE(shown.out.find(schedule::schedule_to_text(lowered->lowered)), std::string::npos) << shown.out;
    }
}

TEST(LoweringConsumers, AnotherKindDerivesItsOwnLaunchCounts) {
  plan::Plan p = make(3, 8, {0.004});
  for (auto& s : p.stages) s.launch_count = 3;  // HARP's stored counts...
  p.stages[2].launch_count = 1;
  auto own = schedule::lower_plan(p);
  auto standard = schedule::lower_plan(p, plan::ScheduleKind::k1F1B);  // ...are not 1F1B's
  ASSERT_TRUE(own.ok() && standard.ok());
  EXPECT_EQ(own->launch_counts, (std::vector<int>{3, 3, 1}));
  EXPECT_EQ(standard->launch_counts, (std::vector<int>{3, 2, 1}));
}

}  // namespace
}  // namespace harp
