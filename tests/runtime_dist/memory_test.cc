// The runtime's tensor memory counter (runtime/memory.h) and what `harp train` reports
// with it: exact byte counts for known tensors, and a step's peak that grows with the
// microbatches in flight by at least what each one must keep (its logits' softmax).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "harp/runtime/exec/data.h"
#include "harp/runtime/exec/memory.h"
#include "rank_threads.h"
#include "testutil/tiny_gpt.h"

namespace harp::runtime {
namespace {

TEST(TensorMemory, CountsLiveBytesAndThePeakExactly) {
  install_counting_allocator();
  install_counting_allocator();  // idempotent
  const double before = live_tensor_bytes();
  torch::Tensor a = torch::empty({1000}, torch::kFloat32);
  EXPECT_EQ(live_tensor_bytes() - before, 4000);
  reset_peak_tensor_bytes();
  {
    torch::Tensor b = torch::zeros({250, 4}, torch::kFloat64);
    EXPECT_EQ(live_tensor_bytes() - before, 4000 + 8000);
  }
  EXPECT_EQ(live_tensor_bytes() - before, 4000);
  EXPECT_EQ(peak_tensor_bytes() - before, 4000 + 8000);
  a = torch::Tensor();
  EXPECT_EQ(live_tensor_bytes(), before);
  reset_peak_tensor_bytes();
  EXPECT_EQ(peak_tensor_bytes(), before);
}

// One stage, one rank (so the process's counter is the rank's): GPipe keeps all B
// microbatches' activations before the first backward, 1F1B one.
TEST(TensorMemory, TrainReportsThePeakOfTheMicrobatchesInFlight) {
  torch::set_num_threads(1);
  install_counting_allocator();
  const model::ModelSpec m = testing::tiny_gpt(2, /*tied=*/false);
  auto data = synthetic_tokens(5, 1 << 14, m.gpt.vocab);
  const int B = 4, mbs = 2;
  std::map<std::string, TrainSummary> got;
  for (auto kind : {plan::ScheduleKind::kGpipe, plan::ScheduleKind::k1F1B}) {
    plan::Plan p = testing::make_plan(m, {}, {1}, B, mbs, kind);
    TrainOptions o;
    o.progress = false;
    o.steps = 3;
    o.measure_memory = true;
    o.out_dir = std::string(HARP_BINARY_DIR) + "/memory_test/" + plan::schedule_kind_name(kind);
    std::filesystem::remove_all(o.out_dir);
    got[plan::schedule_kind_name(kind)] = testing::train_threads(m, p, *data, o);
  }
  const TrainSummary& gpipe = got["gpipe"];
  const TrainSummary& one = got["1f1b"];
  ASSERT_EQ(gpipe.peak_bytes.size(), 1u);
  ASSERT_EQ(one.peak_bytes.size(), 1u);
  // The state (parameters, gradients, Adam's moments) is the same under both schedules
  // and at least the parameters and the two moments.
  double params = 0;
  for (const auto& l : m.layers) params += static_cast<double>(l.param_count);
  EXPECT_GE(one.base_bytes[0], 3 * 4 * params);
  EXPECT_EQ(gpipe.base_bytes[0], one.base_bytes[0]);
  EXPECT_GT(one.peak_bytes[0], one.base_bytes[0]);
  // Each of the B - 1 extra microbatches keeps at least its softmax over the vocabulary.
  const double softmax = 4.0 * mbs * m.gpt.seq_len * m.gpt.vocab;
  EXPECT_GE(gpipe.peak_bytes[0] - one.peak_bytes[0], (B - 1) * softmax);
}

}  // namespace
}  // namespace harp::runtime
