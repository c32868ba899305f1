// The runtime's linear layer (oneDNN's sgemm for float32 on the CPU) against libtorch's
// own torch::linear in float64, as the independent reference: forward, and the gradients
// of input, weight and bias through autograd, over shapes with odd sizes, 1-, 2- and
// 3-dimensional inputs, non-contiguous inputs, no bias, and partial requires_grad.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "harp/runtime/nn/linear.h"
#include "harp/runtime/nn/precision.h"
#include "harp/runtime/nn/weight_grad.h"

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

// A split backward (weight_grad.h): under DeferWeightGrads the backward leaves the weight's
// gradient out and queues its product; the input and bias gradients come at once; running
// the queue adds the product, and every gradient then equals libtorch's. Float32 (oneDNN's
// path where built), float64 and bf16 autocast (libtorch's products), with and without bias.
TEST(Linear, DeferredWeightGradientsAreTorchsOnceRun) {
  for (const auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    for (const bool bias : {true, false}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (bias ? " bias" : " no bias"));
      auto gen = at::detail::createCPUGenerator(5);
      const auto param = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      const torch::Tensor x0 = torch::randn({2, 3, 8}, gen, param), w0 = torch::randn({4, 8}, gen, param),
                          b0 = torch::randn({4}, gen, param), dy = torch::randn({2, 3, 4}, gen, param);
      auto leaves = [&] {
        return std::array<torch::Tensor, 3>{x0.clone().requires_grad_(true), w0.clone().requires_grad_(true),
                                            b0.clone().requires_grad_(true)};
      };
      auto run = [&](const std::array<torch::Tensor, 3>& t, WeightGradQueue* queue) {
        AutocastGuard autocast(dtype == torch::kBFloat16);
        DeferWeightGrads defer(queue);
        return runtime::linear(t[0], t[1], bias ? t[2] : torch::Tensor());
      };
      const auto want = leaves();
      const torch::Tensor y_want = run(want, nullptr);
      y_want.backward(dy.to(y_want.scalar_type()));
      WeightGradQueue queue;
      const auto got = leaves();
      const torch::Tensor y_got = run(got, &queue);
      ASSERT_EQ(y_got.scalar_type(), y_want.scalar_type());
      const double tol = dtype == torch::kBFloat16 ? 3e-2 : dtype == torch::kFloat32 ? 1e-5 : 1e-12;
      EXPECT_TRUE(torch::allclose(y_got.to(param), y_want.to(param), tol, tol));
      y_got.backward(dy.to(y_got.scalar_type()));
      EXPECT_FALSE(got[1].grad().defined()) << "the weight's gradient waits for W";
      EXPECT_EQ(queue.size(), 1u);
      EXPECT_GT(queue.held_bytes(), 0);
      EXPECT_TRUE(torch::allclose(got[0].grad(), want[0].grad(), tol, tol));
      if (bias) {
        EXPECT_TRUE(torch::allclose(got[2].grad(), want[2].grad(), tol, tol));
      }
      EXPECT_EQ(queue.run(), 1u);
      EXPECT_EQ(queue.size(), 0u);
      ASSERT_TRUE(got[1].grad().defined());
      EXPECT_EQ(got[1].grad().scalar_type(), param);
      EXPECT_TRUE(torch::allclose(got[1].grad(), want[1].grad(), tol, tol))
          << (got[1].grad() - want[1].grad()).abs().max().item<double>();
    }
  }
}

// A weight that is not a leaf (derived from a parameter) is not deferred: its gradient
// flows through the graph as without the guard.
TEST(Linear, DerivedWeightsAreNotDeferred) {
  const torch::Tensor x = torch::ones({2, 8}), p = torch::ones({4, 8}).requires_grad_(true);
  WeightGradQueue queue;
  torch::Tensor y;
  {
    DeferWeightGrads defer(&queue);
    y = runtime::linear(x, p * 2);
  }
  y.sum().backward();
  EXPECT_EQ(queue.size(), 0u);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_TRUE(torch::allclose(p.grad(), torch::full({4, 8}, 4.0)));
}

}  // namespace
}  // namespace harp::runtime
