// NCCL's rules on the CPU (mem_transport.h, MemNetwork::Rules::kNccl): what only a GPU
// would show, found by `make test`.
//
// The bug (issue 58): on CUDA every compute span ended in torch::cuda::synchronize, a
// device-wide synchronisation, which also waits for the receives posted ahead on NCCL's
// streams. Two stages, 1F1B, two microbatches: stage 0's F1 waits for its posted receive
// of B0's gradient, which stage 1 sends after F0 and B0; stage 1's F0 waits for its posted
// receive of activation 1, which stage 0 sends after F1. Every plan of two or more stages
// and microbatches hung in its first step. The executor now ends a span with a mark on
// its stream and synchronises once, at the step's end (compute_stream.h); the grid below
// ran into the rules' deadlock before that change, under every schedule.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harp/runtime/comm/mem_transport.h"
#include "rank_threads.h"
#include "testutil/tiny_gpt.h"

namespace harp::testing {
namespace {

using runtime::MemNetwork;
using runtime::RuntimeFailure;
using runtime::Transport;
using namespace std::chrono_literals;

// Two ranks of a two-stage plan over a network with NCCL's rules.
struct Pair {
  model::ModelSpec model = tiny_gpt(1);
  plan::Plan plan = make_plan(model, {2}, {1, 1}, 2, 1, plan::ScheduleKind::k1F1B);
  MemNetwork net{2, {}, MemNetwork::Rules::kNccl};
  std::unique_ptr<Transport> rank(int r, std::chrono::milliseconds timeout) {
    auto layout = runtime::layout_for(plan, 2, r);
    HARP_CHECK(layout.ok());
    return net.connect(*layout, timeout);
  }
};

torch::Tensor filled(float v) { return torch::full({4}, v); }

TEST(NcclRules, DeviceSynchronisationWaitsForAPostedReceive) {
  Pair p;
  auto r0 = p.rank(0, 5000ms), r1 = p.rank(1, 200ms);
  torch::Tensor in = torch::zeros({4});
  runtime::Transfer posted = r1->irecv(in, 0, 7, "waiting for 1RECV_F3 from rank");
  try {  // nothing sent: the posted receive holds the device
    r1->synchronize_device("rank 1 after 1F2");
    ADD_FAILURE() << "a device-wide synchronisation returned with a receive posted and nothing sent";
  } catch (const RuntimeFailure& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 1 after 1F2"), std::string::npos) << m;
    EXPECT_NE(m.find("receive of tag 7 from rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
  }
  torch::Tensor out = filled(3);
  runtime::Transfer sent = r0->isend(out, 1, 7, "sending 0SEND_F3 to rank");
  r1->synchronize_device("rank 1 after 1F2");  // the data is there now
  posted.wait(1000ms);
  EXPECT_TRUE(torch::equal(in, filled(3)));
  sent.wait(1000ms);
}

TEST(NcclRules, ASendCompletesOnlyOnceItsReceiveIsPosted) {
  Pair p;
  auto r0 = p.rank(0, 5000ms), r1 = p.rank(1, 5000ms);
  torch::Tensor out = filled(1);
  runtime::Transfer early = r0->isend(out, 1, 0, "sending 0SEND_F0 to rank");
  try {
    early.wait(100ms);
    ADD_FAILURE() << "a send completed before its receive was posted";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("its receive was never posted"), std::string::npos) << e.what();
  }
  try {
    r0->synchronize_device("rank 0 after 0F1");
    ADD_FAILURE() << "a device-wide synchronisation returned with an unmatched send";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("a send to rank 1 whose receive has not been posted"), std::string::npos)
        << e.what();
  }
  torch::Tensor second = filled(2), in = torch::zeros({4}), in2 = torch::zeros({4});
  runtime::Transfer late = r0->isend(second, 1, 2, "sending 0SEND_F1 to rank");
  std::string error;
  std::thread receiver([&] {
    std::this_thread::sleep_for(50ms);
    try {
      r1->irecv(in, 0, 0, "waiting for 1RECV_F0 from rank").wait(1000ms);  // the first send's message
      r1->irecv(in2, 0, 2, "waiting for 1RECV_F1 from rank").wait(1000ms);
    } catch (const RuntimeFailure& e) {
      error = e.what();
    }
  });
  try {
    late.wait(2000ms);  // returns once its receive, the second, is posted
  } catch (const RuntimeFailure& e) {
    ADD_FAILURE() << e.what();
  }
  receiver.join();
  EXPECT_EQ(error, "");
  EXPECT_TRUE(torch::equal(in, filled(1)));
  EXPECT_TRUE(torch::equal(in2, filled(2)));
}

TEST(NcclRules, MessagesMatchInOrderAndATagMismatchIsNamed) {
  Pair p;
  auto r0 = p.rank(0, 5000ms), r1 = p.rank(1, 5000ms);
  torch::Tensor a = filled(1), b = filled(2), in = torch::zeros({4});
  r0->isend(a, 1, 4, "sending 0SEND_F2 to rank");
  r0->isend(b, 1, 6, "sending 0SEND_F3 to rank");
  try {  // Gloo would match tag 6 to the second message; NCCL hands over the first
    r1->irecv(in, 0, 6, "waiting for 1RECV_F3 from rank").wait(1000ms);
    ADD_FAILURE() << "a receive took a message sent with another tag";
  } catch (const RuntimeFailure& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("1RECV_F3 from rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("posted for tag 6"), std::string::npos) << m;
    EXPECT_NE(m.find("carries tag 4"), std::string::npos) << m;
  }
}

struct Case {
  plan::ScheduleKind kind;
  int stages;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = std::string(plan::schedule_kind_name(info.param.kind)) + "_" + std::to_string(info.param.stages);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

class NcclSchedules : public ::testing::TestWithParam<Case> {};

// Cuts over the three-block model's 8 layers (k = 2): stage i starts at cuts[i - 1].
std::vector<int> cuts_for(int stages) {
  switch (stages) {
    case 2:
      return {4};
    case 3:
      return {2, 5};
    case 4:
      return {2, 4, 6};
    default:
      return {1, 3, 5, 7};
  }
}

// Every schedule, 2-5 stages, data parallelism on a middle stage: the run ends under
// NCCL's rules, with the losses of the buffered transport and two host synchronisations
// a step on every rank.
TEST_P(NcclSchedules, RunsAsBufferedWithTwoHostSyncsAStep) {
  const Case c = GetParam();
  const model::ModelSpec model = three_block_model(2);
  std::vector<int> dp(static_cast<size_t>(c.stages), 1);
  if (c.stages >= 3) dp[1] = 2;
  const plan::Plan plan = make_plan(model, cuts_for(c.stages), dp, 4, 2, c.kind);
  auto data = runtime::synthetic_tokens(5, 1 << 12, model.gpt.vocab);
  const runtime::ExecConfig config = equivalence_config(torch::kFloat32);
  torch::set_num_threads(1);
  RankRun nccl, buffered;
  const auto errors = run_plan_in_memory(model, plan, *data, 2, config, {}, 2000ms, &nccl, MemNetwork::Rules::kNccl);
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  for (const auto& e : run_plan_in_memory(model, plan, *data, 2, config, {}, 5000ms, &buffered)) EXPECT_EQ(e, "");
  EXPECT_EQ(nccl.losses, buffered.losses);  // the same operations on the same values
  ASSERT_EQ(nccl.host_syncs.size(), 2u);
  for (std::int64_t n : nccl.host_syncs) EXPECT_EQ(n, 2) << "the norm and loss read at STEP, the step's end";
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (plan::ScheduleKind kind : {plan::ScheduleKind::kGpipe, plan::ScheduleKind::k1F1B, plan::ScheduleKind::kHarp1F1B,
                                  plan::ScheduleKind::kZbH1, plan::ScheduleKind::kZbH2, plan::ScheduleKind::kHarpZb})
    for (int stages = 2; stages <= 5; ++stages) out.push_back({kind, stages});
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryKind, NcclSchedules, ::testing::ValuesIn(all_cases()), case_name);

// The budget: host synchronisations per step do not grow with the microbatches or the
// parameters (one per parameter tensor and several per microbatch before: gpu-review.md).
TEST(SyncBudget, ConstantInMicrobatchesAndParameters) {
  torch::set_num_threads(1);
  auto count = [](const model::ModelSpec& model, int microbatches, int tp) {
    const plan::Plan plan = make_plan(model, {2}, {1, 2}, microbatches, 2, plan::ScheduleKind::k1F1B, {}, {tp, 1});
    auto data = runtime::synthetic_tokens(5, 1 << 12, model.gpt.vocab);
    RankRun run;
    for (const auto& e :
         run_plan_in_memory(model, plan, *data, 2, equivalence_config(torch::kFloat32), {}, 5000ms, &run))
      EXPECT_EQ(e, "");
    return run.host_syncs;
  };
  const std::vector<std::int64_t> two = {2, 2};
  EXPECT_EQ(count(tiny_gpt(1), 2, 1), two);                    // 4 layers, 2 microbatches
  EXPECT_EQ(count(three_block_model(2), 8, 1), two);           // 8 layers, 8 microbatches
  EXPECT_EQ(count(three_block_model(2, "llama"), 8, 2), two);  // tensor parallelism on stage 0
}

}  // namespace
}  // namespace harp::testing
