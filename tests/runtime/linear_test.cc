// The runtime's linear layer (oneDNN's sgemm for float32 on the CPU) against libtorch's
// own torch::linear in float64, as the independent reference: forward, and the gradients
// of input, weight and bias through autograd, over shapes with odd sizes, 1-, 2- and
// 3-dimensional inputs, non-contiguous inputs, no bias, and partial requires_grad.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "harp/runtime/nn/linear.h"
#include "harp/runtime/nn/precision.h"

namespace harp::runtime {
namespace {

struct Case {
  std::vector<std::int64_t> x_shape;
  std::int64_t n;
  bool bias, transposed_input, weight_grad;
};

class LinearMatchesTorch : public ::testing::TestWithParam<Case> {};

TEST_P(LinearMatchesTorch, ForwardAndGradients) {
  const Case c = GetParam();
  auto gen = at::detail::createCPUGenerator(11);
  const std::int64_t k = c.x_shape.back();
  torch::Tensor x;
  if (c.transposed_input) {  // the same values, laid out transposed in memory
    std::vector<std::int64_t> flipped(c.x_shape.rbegin(), c.x_shape.rend());
    x = torch::randn(flipped, gen, torch::kFloat64).permute([&] {
      std::vector<std::int64_t> dims;
      for (auto d = static_cast<std::int64_t>(c.x_shape.size()) - 1; d >= 0; --d) dims.push_back(d);
      return dims;
    }());
    ASSERT_FALSE(x.is_contiguous());
  } else {
    x = torch::randn(c.x_shape, gen, torch::kFloat64);
  }
  const torch::Tensor w = torch::randn({c.n, k}, gen, torch::kFloat64) * 0.1;
  const torch::Tensor b = c.bias ? torch::randn({c.n}, gen, torch::kFloat64) : torch::Tensor();
  std::vector<std::int64_t> out_shape = c.x_shape;
  out_shape.back() = c.n;
  const torch::Tensor dy = torch::randn(out_shape, gen, torch::kFloat64);

  // The reference: libtorch's linear in float64.
  auto leaf = [](const torch::Tensor& t, bool grad) { return t.defined() ? t.detach().clone().requires_grad_(grad) : t; };
  torch::Tensor rx = leaf(x, true), rw = leaf(w, c.weight_grad), rb = leaf(b, true);
  torch::Tensor ry = torch::linear(rx, rw, rb);
  ry.backward(dy);

  // The runtime's, in float32.
  auto f32 = [&](const torch::Tensor& t, bool grad) {
    return t.defined() ? t.detach().to(torch::kFloat32).requires_grad_(grad) : t;
  };
  torch::Tensor fx = f32(x, true), fw = f32(w, c.weight_grad), fb = f32(b, true);
  EXPECT_EQ(linear_uses_onednn(fx, fw), onednn_available());
  torch::Tensor fy = runtime::linear(fx, fw, fb);
  ASSERT_EQ(fy.sizes(), ry.sizes());
  fy.backward(dy.to(torch::kFloat32));

  const double rtol = 1e-5, atol = 1e-5;
  EXPECT_TRUE(torch::allclose(fy.to(torch::kFloat64), ry, rtol, atol))
      << "max |diff| " << (fy.to(torch::kFloat64) - ry).abs().max().item<double>();
  ASSERT_TRUE(fx.grad().defined());
  EXPECT_TRUE(torch::allclose(fx.grad().to(torch::kFloat64), rx.grad(), rtol, atol))
      << "dx max |diff| " << (fx.grad().to(torch::kFloat64) - rx.grad()).abs().max().item<double>();
  if (c.weight_grad) {
    ASSERT_TRUE(fw.grad().defined());
    EXPECT_TRUE(torch::allclose(fw.grad().to(torch::kFloat64), rw.grad(), rtol, 1e-4))
        << "dW max |diff| " << (fw.grad().to(torch::kFloat64) - rw.grad()).abs().max().item<double>();
  } else {
    EXPECT_FALSE(fw.grad().defined());
  }
  if (c.bias) {
    ASSERT_TRUE(fb.grad().defined());
    EXPECT_TRUE(torch::allclose(fb.grad().to(torch::kFloat64), rb.grad(), rtol, 1e-4));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearMatchesTorch,
                         ::testing::Values(Case{{4, 16, 32}, 48, true, false, true},   // a block's projection
                                           Case{{3, 7, 33}, 17, true, false, true},    // odd sizes
                                           Case{{5, 33}, 65, false, false, true},      // 2-D, no bias (LLaMA)
                                           Case{{9}, 5, true, false, true},            // 1-D input
                                           Case{{6, 5, 24}, 10, true, true, true},     // non-contiguous input
                                           Case{{2, 8, 16}, 12, true, false, false},   // frozen weight
                                           Case{{0, 16}, 8, true, false, true}));      // no rows

// Under bf16 autocast the product is libtorch's (in bf16), not the float32 kernel.
TEST(Linear, AutocastGoesToTorch) {
  const torch::Tensor x = torch::ones({2, 8}), w = torch::ones({4, 8});
  AutocastGuard bf16(true);
  EXPECT_FALSE(linear_uses_onednn(x, w));
  EXPECT_EQ(runtime::linear(x, w).scalar_type(), torch::kBFloat16);
}

// float64 is libtorch's too (oneDNN's sgemm is float32 only), and exact against it.
TEST(Linear, Float64IsTorchs) {
  auto gen = at::detail::createCPUGenerator(3);
  const torch::Tensor x = torch::randn({3, 8}, gen, torch::kFloat64), w = torch::randn({4, 8}, gen, torch::kFloat64);
  EXPECT_FALSE(linear_uses_onednn(x, w));
  EXPECT_TRUE(torch::equal(runtime::linear(x, w), torch::linear(x, w)));
}

}  // namespace
}  // namespace harp::runtime
