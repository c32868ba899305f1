// The attention core CUDA runs, libtorch's scaled_dot_product_attention (causal, GQA
// without copies), against the path it replaced there, matmul, softmax and matmul with k
// and v repeated per query head (runtime/nn/attention.cc): the same outputs and
// gradients on the CPU in float64, float32 and under bf16 autocast, for GPT's heads,
// grouped- and multi-query heads, an odd length and one token. CPU SDPA runs other
// kernels than CUDA's, so this holds the semantics (the mask, the scale, the grouping),
// not CUDA's rounding: scripts/gpu_check.sh compares a CUDA run with the CPU's.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "gpt_pieces.h"
#include "harp/runtime/nn/precision.h"

namespace harp::runtime {
namespace {

struct Case {
  int b, s, a, g, d;
};

struct Result {
  torch::Tensor out, dq, dk, dv;
};

// q [b, a, s, d], k and v [b, g, s, d], as strided views ([b, s, heads, d] transposed),
// the way the layers hand them over.
Result run(const Case& c, torch::Dtype dtype, bool sdpa, bool autocast) {
  auto gen = at::detail::createCPUGenerator(17);
  auto draw = [&](int heads) {
    return torch::randn({c.b, c.s, heads, c.d}, gen, torch::kFloat64).to(dtype).requires_grad_(true);
  };
  torch::Tensor q = draw(c.a), k = draw(c.g), v = draw(c.g);
  const torch::Tensor dout = torch::randn({c.b, c.a, c.s, c.d}, gen, torch::kFloat64);
  torch::Tensor out;
  {
    AutocastGuard guard(autocast);  // bf16 on the CPU when on
    auto heads_first = [](const torch::Tensor& t) { return t.transpose(1, 2); };
    const torch::Tensor lq = autocast ? heads_first(q).to(torch::kBFloat16) : heads_first(q);
    const torch::Tensor lk = autocast ? heads_first(k).to(torch::kBFloat16) : heads_first(k);
    const torch::Tensor lv = autocast ? heads_first(v).to(torch::kBFloat16) : heads_first(v);
    out = sdpa ? sdpa_causal_attention(lq, lk, lv) : libtorch_causal_attention(lq, lk, lv, false);
  }
  out.backward(dout.to(out.scalar_type()));
  return {out.detach().to(torch::kFloat64), q.grad().to(torch::kFloat64), k.grad().to(torch::kFloat64),
          v.grad().to(torch::kFloat64)};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

class SdpaMatchesToday : public ::testing::TestWithParam<Case> {
 protected:
  void expect_close(torch::Dtype dtype, bool autocast, double tolerance) {
    const Case c = GetParam();
    const Result want = run(c, dtype, false, autocast), got = run(c, dtype, true, autocast);
    EXPECT_EQ(got.out.sizes(), want.out.sizes());
    const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> pairs[] = {{"output", {got.out, want.out}},
                                                                                     {"dq", {got.dq, want.dq}},
                                                                                     {"dk", {got.dk, want.dk}},
                                                                                     {"dv", {got.dv, want.dv}}};
    for (const auto& [name, t] : pairs) {
      // Relative to the tensor's scale: the gradients of k and v add a/g heads.
      const double scale = std::max(1.0, t.second.abs().max().item<double>());
      EXPECT_LE(max_diff(t.first, t.second) / scale, tolerance)
          << name << " in " << c10::toString(dtype) << (autocast ? " under bf16 autocast" : "");
    }
  }
};

TEST_P(SdpaMatchesToday, Float64) { expect_close(torch::kFloat64, false, 1e-10); }
TEST_P(SdpaMatchesToday, Float32) { expect_close(torch::kFloat32, false, 1e-5); }
// bf16 products both ways, softmax in float32 both ways: within bf16's rounding (8 bits).
TEST_P(SdpaMatchesToday, Bf16Autocast) { expect_close(torch::kFloat32, true, 3e-2); }

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaMatchesToday,
                         ::testing::Values(Case{2, 16, 4, 4, 8},   // GPT: every head its own k, v
                                           Case{3, 33, 4, 2, 16},  // grouped-query, odd length
                                           Case{1, 7, 6, 1, 4},    // multi-query
                                           Case{2, 1, 2, 2, 8}));  // one token

// The path the runtime takes: SDPA unless the tensors are the CPU's bf16 (or fp16).
TEST(AttentionCore, TakesSdpaExceptForTheCpusLowPrecision) {
  const Case c{2, 9, 4, 2, 8};
  auto gen = at::detail::createCPUGenerator(3);
  auto draw = [&](int heads, torch::Dtype dtype) {
    return torch::randn({c.b, heads, c.s, c.d}, gen, torch::kFloat64).to(dtype);
  };
  for (torch::Dtype dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    const torch::Tensor q = draw(c.a, dtype), k = draw(c.g, dtype), v = draw(c.g, dtype);
    const torch::Tensor core = causal_attention_core(q, k, v, false);
    const torch::Tensor expected =
        dtype == torch::kBFloat16 ? libtorch_causal_attention(q, k, v, false) : sdpa_causal_attention(q, k, v);
    EXPECT_TRUE(torch::equal(core, expected)) << c10::toString(dtype);
  }
}

}  // namespace
}  // namespace harp::runtime
