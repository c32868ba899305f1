// The runtime on CUDA (label gpu: `make test` leaves them out; scripts/gpu_check.sh runs
// them on a GPU machine). Each test skips itself where libtorch sees no CUDA device.
// One GPU holds one NCCL rank, so these run one NCCL rank: the layers, the optimizer and
// the executor on the GPU (NCCL in its one-rank tied-embedding group), against the same
// run on the CPU; float32 within the GPU's own rounding, bf16 and fp16 (with dynamic loss
// scaling) within their precision of float32. Pipelines of 2 and 4 stages run on the one
// GPU as thread ranks over the in-memory transport, with CUDA tensors: the executor's
// stream semantics (marks, waits, one synchronisation at the step's end) for real.
// HARP_GPU_TEST_DEVICE=cpu runs them all on the CPU instead (scripts/gpu_check.sh
// --dry-run: the check's own logic, CPU against CPU; float16, CUDA's, is left out there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <torch/cuda.h>

#include "harp/runtime/comm/comm.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/generate.h"
#include "rank_threads.h"

namespace harp::testing {
namespace {

using plan::ScheduleKind;

// The device under test: cuda:0, or the CPU when HARP_GPU_TEST_DEVICE=cpu (a dry run).
torch::Device device_under_test() {
  const char* d = std::getenv("HARP_GPU_TEST_DEVICE");
  return d != nullptr && std::string(d) == "cpu" ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, 0);
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_under_test().is_cpu()) return;
    if (!torch::cuda::is_available()) GTEST_SKIP() << "libtorch sees no CUDA device";
    if (!runtime::C10dTransport::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
    runtime::set_current_device(device_under_test());
  }
  runtime::ExecConfig config(torch::Dtype dtype, const torch::Device& device) const {
    runtime::ExecConfig c;
    c.seed = 21;
    c.optim = equivalence_optim();
    c.dtype = dtype;
    c.device = device;
    if (dtype == torch::kHalf) c.loss_scale = 65536;
    return c;
  }
};

double max_relative(const RankRun& got, const RankRun& want) {
  double worst = 0;
  std::map<std::string, torch::Tensor> g(got.params.begin(), got.params.end());
  for (const auto& [name, w] : want.params) {
    const double scale = std::max(1e-12, w.abs().max().item<double>());
    worst = std::max(worst, (g.at(name).to(torch::kFloat64) - w.to(torch::kFloat64)).abs().max().item<double>() / scale);
  }
  return worst;
}

// Two stages on one rank each would need two GPUs; one stage of the whole model on one
// GPU: every layer, the loss and AdamW on CUDA.
// harp train's check of the GPU against libtorch's kernel list (runtime/exec/device.h)
// reads that list from the real libtorch and passes this GPU: the parse that a V100
// under a CUDA 13 PyTorch would fail is the one the lent GPU passes.
TEST_F(Gpu, LibtorchsKernelListCoversThisGpu) {
  if (device_under_test().is_cpu()) GTEST_SKIP() << "a CUDA device's check";
  const runtime::CudaDeviceInfo gpu = runtime::cuda_device_info(device_under_test());
  const std::vector<std::string> archs = runtime::libtorch_cuda_archs();
  std::string list;
  for (const std::string& a : archs) list += " " + a;
  std::printf("%s: sm_%d%d; libtorch's kernels:%s\n", gpu.name.c_str(), gpu.major, gpu.minor, list.c_str());
  ASSERT_FALSE(archs.empty()) << "no NVCC architecture list in libtorch's configuration";
  EXPECT_TRUE(runtime::archs_run_on(archs, gpu.major, gpu.minor));
  EXPECT_TRUE(runtime::check_cuda_device(gpu, archs, gpu.major >= 8).ok());
}

TEST_F(Gpu, Float32OnCudaIsTheCpuRun) {
  const model::ModelSpec m = three_block_model(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const plan::Plan p = make_plan(m, {}, {1}, 3, 2, ScheduleKind::k1F1B);
  const RankRun cpu = run_plan_threads(m, p, *data, 3, config(torch::kFloat32, torch::kCPU));
  const RankRun gpu = run_plan_threads(m, p, *data, 3, config(torch::kFloat32, device_under_test()));
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    std::printf("step %zu: loss cpu %.7f device %.7f\n", s, cpu.losses[s], gpu.losses[s]);
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-5 * cpu.losses[s]);
  }
  const double rel = max_relative(gpu, cpu);
  std::printf("parameters after 3 steps: max |device - cpu| / max |cpu| = %.2e\n", rel);
  EXPECT_LT(rel, 1e-4);
}

// harp generate on CUDA: the same weights give the CPU's greedy tokens (float64, so that
// the two devices' rounding cannot flip a choice), with the KV cache and without, and the
// CPU's sampled tokens (the sampler draws on the CPU from the seed).
TEST_F(Gpu, GenerationOnCudaIsTheCpus) {
  const model::ModelSpec m = three_block_model(1, "llama", 256);
  auto layers = runtime::build_gpt_layers(m, 0, m.num_layers(), 5, torch::kFloat64, torch::kCPU);
  runtime::NamedTensors params;
  for (auto& [name, p] : runtime::named_parameters(layers)) params.emplace_back(name, p.detach().mul(8.0));
  auto cpu = runtime::LanguageModel::from_params(m, params, torch::kFloat64, torch::kCPU);
  auto gpu = runtime::LanguageModel::from_params(m, params, torch::kFloat64, device_under_test());
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  for (double temperature : {0.0, 1.0}) {
    runtime::GenerateOptions o;
    o.max_new_tokens = 30;
    o.sampling.temperature = temperature;
    const auto want = runtime::generate(*cpu, {1, 2, 3, 4}, o)->tokens;
    EXPECT_EQ(runtime::generate(*gpu, {1, 2, 3, 4}, o)->tokens, want) << "temperature " << temperature;
    o.use_cache = false;
    EXPECT_EQ(runtime::generate(*gpu, {1, 2, 3, 4}, o)->tokens, want) << "no cache, temperature " << temperature;
  }
}

// bf16 and fp16 autocast on CUDA against float32 on CUDA: the losses within 2%; fp16's
// loss scale stays a power of two and the steps go through.
TEST_F(Gpu, Bf16AndFp16TrainWithinTheirPrecision) {
  const model::ModelSpec m = three_block_model(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  const plan::Plan p = make_plan(m, {}, {1}, 3, 2, ScheduleKind::k1F1B);
  const torch::Device cuda = device_under_test();
  const RankRun f32 = run_plan_threads(m, p, *data, 4, config(torch::kFloat32, cuda));
  for (torch::Dtype low : {torch::kBFloat16, torch::kHalf}) {
    if (low == torch::kHalf && cuda.is_cpu()) continue;
    const RankRun got = run_plan_threads(m, p, *data, 4, config(low, cuda));
    ASSERT_EQ(got.losses.size(), f32.losses.size());
    for (size_t s = 0; s < f32.losses.size(); ++s) {
      std::printf("%s step %zu: loss %.5f (float32 %.5f)\n", low == torch::kHalf ? "fp16" : "bf16", s, got.losses[s],
                  f32.losses[s]);
      EXPECT_NEAR(got.losses[s], f32.losses[s], 0.02 * f32.losses[s]);
    }
    std::printf("%s: parameters max relative difference to float32 %.2e\n", low == torch::kHalf ? "fp16" : "bf16",
                max_relative(got, f32));
  }
}

// 2 and 4 stages (1F1B and zb-h1) on the one GPU, each stage a thread rank, over the
// in-memory transport with CUDA tensors: the losses of the same plan on the CPU. The
// executor marks spans with CUDA events, lets compute wait for received tensors and
// synchronises once per step: a device-wide synchronisation per span, as before, would
// also pass here (the in-memory transport posts no device work); the CPU test of NCCL's
// rules (nccl_semantics_test) is what fails on it.
TEST_F(Gpu, PipelinesOnOneGpuAreTheCpuRun) {
  const model::ModelSpec m = three_block_model(2);
  auto data = runtime::synthetic_tokens(3, 1 << 14, m.gpt.vocab);
  for (const auto& [cuts, kind] : {std::make_pair(std::vector<int>{4}, ScheduleKind::k1F1B),
                                   std::make_pair(std::vector<int>{2, 4, 6}, ScheduleKind::kZbH1)}) {
    const plan::Plan p = make_plan(m, cuts, std::vector<int>(cuts.size() + 1, 1), 4, 2, kind);
    RankRun cpu, gpu;
    for (auto [device, run] :
         {std::make_pair(torch::Device(torch::kCPU), &cpu), std::make_pair(device_under_test(), &gpu)})
      for (const std::string& e : run_plan_in_memory(m, p, *data, 3, config(torch::kFloat32, device), {},
                                                     std::chrono::milliseconds(60000), run))
        EXPECT_EQ(e, "") << p.num_stages() << " stages";
    ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
    for (size_t s = 0; s < cpu.losses.size(); ++s) {
      std::printf("%d stages, step %zu: loss cpu %.7f device %.7f; host syncs %lld\n", p.num_stages(), s, cpu.losses[s],
                  gpu.losses[s], static_cast<long long>(gpu.host_syncs[s]));
      EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-5 * cpu.losses[s]);
      EXPECT_EQ(gpu.host_syncs[s], 2);
    }
  }
}

}  // namespace
}  // namespace harp::testing
