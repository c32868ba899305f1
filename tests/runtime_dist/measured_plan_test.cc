// A run's measured_plan.json (trainer.cc): a stage's measured times are its slowest
// replica's, as a plan's are. Three thread ranks: stage 0, and stage 1 of two replicas
// whose second is an emulated device four times slower than its first (a mixed stage):
// the measured stage is the slow replica, each replica's forward + backward is recorded,
// and their ratio is the emulated one.
#include <gtest/gtest.h>

#include <filesystem>

#include "harp/plan/plan_io.h"
#include "rank_threads.h"
#include "testutil/tiny_gpt.h"

namespace harp::runtime {
namespace {

TEST(MeasuredPlan, AMixedStageIsItsSlowestReplica) {
  torch::set_num_threads(1);
  const model::ModelSpec m = testing::tiny_gpt(1, true, /*blocks=*/2, /*hidden=*/96, /*heads=*/4, /*seq=*/64, 64);
  plan::Plan p = testing::make_plan(m, {2}, {1, 2}, 4, 2, plan::ScheduleKind::k1F1B);
  for (plan::Stage& s : p.stages) s.crosses_nodes = false;
  plan::Stage& mixed = p.stages[1];
  mixed.replica_devices = {"fast", "slow"};
  mixed.replica_compute_s = {1e-3, 1e-3};
  mixed.replica_slowdowns = {1.0, 8.0};
  std::unique_ptr<TokenSource> data = synthetic_tokens(3, 1 << 16, m.gpt.vocab);
  TrainOptions o;
  o.progress = false;
  o.steps = 6;
  o.exec.emulate = true;
  o.out_dir = std::string(HARP_BINARY_DIR) + "/measured_plan_test";
  std::filesystem::remove_all(o.out_dir);
  testing::train_threads(m, p, *data, o);

  auto measured = plan::load_plan(o.out_dir + "/measured_plan.json");
  ASSERT_TRUE(measured.ok()) << measured.status().message();
  const plan::Stage& s = measured->stages[1];
  ASSERT_EQ(s.replica_compute_s.size(), 2u);
  const double fast = s.replica_compute_s[0], slow = s.replica_compute_s[1];
  EXPECT_GT(fast, 0);
  // Emulated: the slow replica is busy 8x its CPU time (more where its sleep wakes late),
  // the fast one its wall time (at least its CPU time, and up to 2.4x it with the suite and
  // two `yes` on the two cores: at 4x the ratio fell to 1.7 there); the two replicas
  // compute the same samples.
  EXPECT_GT(slow / fast, 3.0) << fast << " " << slow;
  EXPECT_LT(slow / fast, 16.0) << fast << " " << slow;
  EXPECT_NEAR(s.fwd_s + s.bwd_s, slow, 1e-9 * slow);  // the stage is its slowest replica
  EXPECT_GT(s.fwd_s, 0);
  EXPECT_GT(s.bwd_s, s.fwd_s);
}

}  // namespace
}  // namespace harp::runtime
