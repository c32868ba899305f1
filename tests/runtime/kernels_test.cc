// The fused CPU kernels against libtorch's own operations in float64 (the independent
// reference): GELU (tanh) and causal attention, forward and gradients, for GPT's packed
// q, k, v and for grouped-query attention on strided views; selective recomputation
// bit for bit against the kept probabilities; and the same results at 1 and 2 threads.
#include <cmath>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "harp/runtime/nn/kernels.h"

namespace harp::runtime {
namespace {

class FusedKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fused_kernels_apply(torch::zeros({1}))) GTEST_SKIP() << "built without oneDNN: the kernels are off";
  }
};

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

TEST_F(FusedKernels, GeluMatchesTorch) {
  auto gen = at::detail::createCPUGenerator(5);
  // Wide range, with the tails where σ saturates, and an odd length for the vector tails.
  const torch::Tensor x = torch::cat({torch::randn({40001}, gen, torch::kFloat64) * 3,
                                      torch::tensor({-30.0, -10.0, -1e-6, 0.0, 1e-6, 10.0, 30.0}, torch::kFloat64)});
  const torch::Tensor dy = torch::randn({x.numel()}, gen, torch::kFloat64);
  torch::Tensor rx = x.clone().requires_grad_(true);
  torch::Tensor ry = torch::gelu(rx, "tanh");
  ry.backward(dy);
  torch::Tensor fx = x.to(torch::kFloat32).requires_grad_(true);
  torch::Tensor fy = gelu_tanh(fx);
  fy.backward(dy.to(torch::kFloat32));
  EXPECT_TRUE(torch::allclose(fy.to(torch::kFloat64), ry, 1e-5, 1e-6)) << max_diff(fy, ry);
  EXPECT_TRUE(torch::allclose(fx.grad().to(torch::kFloat64), rx.grad(), 1e-5, 1e-6)) << max_diff(fx.grad(), rx.grad());
  EXPECT_EQ(fy.sizes(), x.sizes());
}

// The reference: softmax(q kᵀ / √d + causal mask) v in float64 libtorch operations,
// q [b, s, a, d], k, v [b, s, g, d] with key/value heads repeated; returns [b, s, a d].
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const std::int64_t b = q.size(0), s = q.size(1), a = q.size(2), d = q.size(3), g = k.size(2);
  auto heads_first = [&](const torch::Tensor& t) { return t.transpose(1, 2).repeat_interleave(a / t.size(2), 1); };
  auto scores = torch::matmul(q.transpose(1, 2), heads_first(k).transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  auto future = torch::ones({s, s}, torch::kBool).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  (void)g;
  return torch::matmul(torch::softmax(scores, -1), heads_first(v)).transpose(1, 2).reshape({b, s, a * d});
}

struct Grads {
  torch::Tensor out, dqkv;
};

// GPT's layout: qkv [b, s, (a + 2g) d] as a projection would leave it, a strided view of
// a wider tensor (as a cut tensor's q, k, v beside the residual).
Grads run_packed(const torch::Tensor& wide, std::int64_t width, int a, int g, const torch::Tensor& dout, bool recompute) {
  torch::Tensor leaf = wide.to(torch::kFloat32).requires_grad_(true);
  torch::Tensor out = causal_attention_packed(leaf.narrow(-1, 0, width), a, g, recompute);
  out.backward(dout.to(torch::kFloat32));
  return {out.detach(), leaf.grad().narrow(-1, 0, width)};
}

Grads run_reference(const torch::Tensor& wide, std::int64_t width, int a, int g, const torch::Tensor& dout) {
  torch::Tensor leaf = wide.clone().requires_grad_(true);
  const torch::Tensor qkv = leaf.narrow(-1, 0, width);
  const std::int64_t b = qkv.size(0), s = qkv.size(1), d = width / (a + 2 * g);
  torch::Tensor out = reference(qkv.narrow(-1, 0, a * d).reshape({b, s, a, d}),
                                qkv.narrow(-1, a * d, g * d).reshape({b, s, g, d}),
                                qkv.narrow(-1, (a + g) * d, g * d).reshape({b, s, g, d}));
  out.backward(dout);
  return {out.detach(), leaf.grad().narrow(-1, 0, width)};
}

struct AttentionCase {
  int b, s, a, g, d;
};

class AttentionMatchesTorch : public FusedKernels, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionMatchesTorch, ForwardGradientsAndRecomputation) {
  const AttentionCase c = GetParam();
  auto gen = at::detail::createCPUGenerator(9);
  const std::int64_t width = (c.a + 2 * c.g) * c.d;
  const torch::Tensor wide = torch::randn({c.b, c.s, width + 5}, gen, torch::kFloat64);
  const torch::Tensor dout = torch::randn({c.b, c.s, c.a * c.d}, gen, torch::kFloat64);
  const Grads want = run_reference(wide, width, c.a, c.g, dout);
  const Grads kept = run_packed(wide, width, c.a, c.g, dout, false);
  EXPECT_TRUE(torch::allclose(kept.out.to(torch::kFloat64), want.out, 1e-5, 1e-5)) << max_diff(kept.out, want.out);
  EXPECT_TRUE(torch::allclose(kept.dqkv.to(torch::kFloat64), want.dqkv, 1e-4, 1e-5)) << max_diff(kept.dqkv, want.dqkv);
  // Selective recomputation: the same bits.
  const Grads recomputed = run_packed(wide, width, c.a, c.g, dout, true);
  EXPECT_TRUE(torch::equal(recomputed.out, kept.out));
  EXPECT_TRUE(torch::equal(recomputed.dqkv, kept.dqkv));
  // Three separate views give what the packed tensor gives.
  torch::Tensor q = wide.narrow(-1, 0, c.a * c.d).to(torch::kFloat32).view({c.b, c.s, c.a, c.d}).requires_grad_(true);
  torch::Tensor k = wide.narrow(-1, c.a * c.d, c.g * c.d).to(torch::kFloat32).view({c.b, c.s, c.g, c.d}).requires_grad_(true);
  torch::Tensor v = wide.narrow(-1, (c.a + c.g) * c.d, c.g * c.d).to(torch::kFloat32).view({c.b, c.s, c.g, c.d}).requires_grad_(true);
  torch::Tensor out = causal_attention(q, k, v);
  out.backward(dout.to(torch::kFloat32));
  EXPECT_TRUE(torch::equal(out, kept.out));
  EXPECT_TRUE(torch::equal(torch::cat({q.grad().flatten(2), k.grad().flatten(2), v.grad().flatten(2)}, -1), kept.dqkv));
  // Evaluation (no graph) keeps no probabilities and gives the same output.
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor qkv = wide.narrow(-1, 0, width).to(torch::kFloat32);
    const torch::Tensor eval_out = causal_attention_packed(qkv, c.a, c.g, false);
    EXPECT_FALSE(eval_out.requires_grad());
    EXPECT_TRUE(torch::equal(eval_out, kept.out));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionMatchesTorch,
                         ::testing::Values(AttentionCase{2, 16, 4, 4, 8},    // GPT: every head its own k, v
                                           AttentionCase{3, 33, 4, 2, 16},   // grouped-query, odd length
                                           AttentionCase{1, 7, 6, 1, 4},     // multi-query
                                           AttentionCase{2, 1, 2, 2, 8}));   // one token

// A (sample, head) is computed by one thread: 1 and 2 threads give the same bits.
TEST_F(FusedKernels, AttentionDoesNotDependOnTheThreadCount) {
  auto gen = at::detail::createCPUGenerator(4);
  const torch::Tensor wide = torch::randn({4, 32, 3 * 4 * 8}, gen, torch::kFloat64);
  const torch::Tensor dout = torch::randn({4, 32, 32}, gen, torch::kFloat64);
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const Grads one = run_packed(wide, wide.size(-1), 4, 4, dout, false);
  at::set_num_threads(2);
  const Grads two = run_packed(wide, wide.size(-1), 4, 4, dout, false);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one.out, two.out));
  EXPECT_TRUE(torch::equal(one.dqkv, two.dqkv));
}

}  // namespace
}  // namespace harp::runtime
