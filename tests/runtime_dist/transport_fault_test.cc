// Failure handling in-process, over the in-memory transport: a peer killed at a chosen
// step and action, a peer stalled past the timeout, a dropped message. The others stop
// with the failed rank, the awaited action and the step named, in well under a second
// per case. Also: the in-memory transport gives the c10d transport's losses, a delay
// below the timeout changes nothing, and the executor runs lower_plan's lists.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <regex>

#include "harp/runtime/comm/mem_transport.h"
#include "rank_threads.h"
#include "testutil/tiny_gpt.h"

namespace harp::testing {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::Fault;
using schedule::Action;
using schedule::ActionKind;

struct World {
  model::ModelSpec model = tiny_gpt(1);  // 4 layers: head, 2 blocks, tail
  plan::Plan plan = make_plan(model, {2, 3}, {1, 1, 1}, 4, 2, plan::ScheduleKind::k1F1B);
  std::unique_ptr<runtime::TokenSource> data = runtime::synthetic_tokens(3, 1 << 12, model.gpt.vocab);
  runtime::ExecConfig config;
};

// Runs 5 steps with the faults; returns each rank's error and the wall time.
std::pair<std::vector<std::string>, double> run(World& w, std::vector<Fault> faults, int timeout_ms) {
  torch::set_num_threads(1);
  const auto start = Clock::now();
  auto errors = run_plan_in_memory(w.model, w.plan, *w.data, 5, w.config, std::move(faults),
                                   std::chrono::milliseconds(timeout_ms), nullptr);
  for (size_t r = 0; r < errors.size(); ++r) std::cout << "  rank " << r << ": " << errors[r] << "\n";
  return {errors, std::chrono::duration<double>(Clock::now() - start).count()};
}

// The survivor's one-line error names the failed rank, the step and a pipeline action.
void expect_names(const std::string& err, int failed_rank, int step) {
  SCOPED_TRACE(err);
  EXPECT_EQ(err.find('\n'), std::string::npos) << "one line";
  EXPECT_NE(err.find("rank " + std::to_string(failed_rank)), std::string::npos) << "names the failed rank";
  EXPECT_NE(err.find("at step " + std::to_string(step)), std::string::npos) << "names the step";
  EXPECT_TRUE(std::regex_search(err, std::regex("[0-9](RECV|SEND)_[FB][0-9]|REDUCE_GRAD|STEP")))
      << "names the awaited action";
}

TEST(TransportFaults, KilledPeerStopsTheOthersAtOnce) {
  World w;
  // Rank 1 (the middle stage) dies at step 2 before its forward of microbatch 1.
  auto [errors, secs] = run(w, {{Fault::Kind::kKill, 1, 2, Action{1, ActionKind::kF, 1}, 0}}, 10000);
  EXPECT_NE(errors[1].find("killed (injected) at step 2 before 1F1"), std::string::npos) << errors[1];
  expect_names(errors[0], 1, 2);
  expect_names(errors[2], 1, 2);
  EXPECT_NE(errors[0].find("died"), std::string::npos) << "seen as a death, not a timeout: " << errors[0];
  EXPECT_LT(secs, 1.0) << "a dead peer is noticed without waiting for the 10 s timeout";
}

TEST(TransportFaults, StalledPeerTimesOutTheOthers) {
  World w;
  auto [errors, secs] = run(w, {{Fault::Kind::kStall, 1, 3, Action{1, ActionKind::kB, 0}, 0}}, 200);
  expect_names(errors[0], 1, 3);
  expect_names(errors[2], 1, 3);
  EXPECT_NE(errors[2].find("timed out after 200 ms"), std::string::npos) << errors[2];
  EXPECT_GE(secs, 0.2) << "a stall is only detected by the timeout";
  EXPECT_LT(secs, 1.0);
}

TEST(TransportFaults, DroppedMessageTimesOutItsReceiver) {
  World w;
  // Stage 0's SEND_F of microbatch 2 at step 1 is lost: stage 1 waits for it in vain.
  auto [errors, secs] = run(w, {{Fault::Kind::kDrop, 0, 1, Action{0, ActionKind::kSendF, 2}, 0}}, 200);
  expect_names(errors[1], 0, 1);
  EXPECT_NE(errors[1].find("1RECV_F2 from rank 0: "), std::string::npos) << errors[1];
  // Stage 0 waits for a backward that stage 1 cannot send: the two wait on each other and
  // only a timeout ends it. Which of the two times out first is a race (the other then
  // sees the closed connection), but one of them must have timed out.
  const bool timed_out = errors[0].find("timed out after 200 ms") != std::string::npos ||
                         errors[1].find("timed out after 200 ms") != std::string::npos;
  EXPECT_TRUE(timed_out) << errors[0] << " | " << errors[1];
  EXPECT_GE(secs, 0.2) << "a lost message is only detected by the timeout";
  EXPECT_LT(secs, 1.0);
}

TEST(TransportFaults, DelayBelowTheTimeoutChangesNothing) {
  World w;
  RankRun clean, delayed;
  torch::set_num_threads(1);
  auto ok = run_plan_in_memory(w.model, w.plan, *w.data, 3, w.config, {}, std::chrono::milliseconds(5000), &clean);
  auto slow = run_plan_in_memory(w.model, w.plan, *w.data, 3, w.config,
                                 {{Fault::Kind::kDelay, 2, 1, Action{2, ActionKind::kB, 1}, 0.05}},
                                 std::chrono::milliseconds(5000), &delayed);
  for (const auto& e : ok) EXPECT_EQ(e, "");
  for (const auto& e : slow) EXPECT_EQ(e, "");
  EXPECT_EQ(clean.losses, delayed.losses);  // bit for bit: the same sums in the same order
}

TEST(TransportFaults, InMemoryTransportMatchesGloo) {
  World w;
  w.plan = make_plan(w.model, {1, 3}, {2, 1, 2}, 4, 2, plan::ScheduleKind::kHarp1F1B);
  torch::set_num_threads(1);
  RankRun mem;
  auto errors = run_plan_in_memory(w.model, w.plan, *w.data, 3, w.config, {}, std::chrono::milliseconds(5000), &mem);
  for (const auto& e : errors) EXPECT_EQ(e, "");
  RankRun gloo = run_plan_threads(w.model, w.plan, *w.data, 3, w.config);
  ASSERT_EQ(mem.losses.size(), gloo.losses.size());
  for (size_t s = 0; s < mem.losses.size(); ++s) EXPECT_NEAR(mem.losses[s], gloo.losses[s], 1e-6) << "step " << s;
}

}  // namespace
}  // namespace harp::testing
