// The runtime's linear layer (see linear.h): oneDNN's sgemm for float32 CPU tensors.
#include "harp/runtime/nn/linear.h"

#include <algorithm>
#include <string>

#include <ATen/Parallel.h>

#include "harp/common/check.h"
#include "harp/runtime/nn/kernels.h"
#include "harp/runtime/nn/precision.h"
#include "harp/runtime/nn/weight_grad.h"
#include "cpu_gemm.h"

namespace harp::runtime {
namespace {

using torch::autograd::AutogradContext;

// A split backward (weight_grad.h): the forward ties the product to this thread's queue
// when its weight is a leaf that wants a gradient; the backward then queues dW.
void tie_to_queue(AutogradContext* ctx, const torch::Tensor& w) {
  WeightGradQueue* q = DeferWeightGrads::current();
  if (q == nullptr || !w.is_leaf() || !w.requires_grad()) return;
  ctx->saved_data["wgrad_queue"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(q));
  ctx->saved_data["wgrad_weight"] = w;
}

WeightGradQueue* queue_of(AutogradContext* ctx) {
  auto it = ctx->saved_data.find("wgrad_queue");
  if (it == ctx->saved_data.end()) return nullptr;
  return reinterpret_cast<WeightGradQueue*>(static_cast<std::intptr_t>(it->second.toInt()));
}

// dW = product(), now or (tied to a queue) at the stage's W.
torch::Tensor weight_grad(AutogradContext* ctx, std::function<torch::Tensor()> product, std::int64_t bytes) {
  WeightGradQueue* q = queue_of(ctx);
  if (q == nullptr) return product();
  q->push(std::move(product), ctx->saved_data["wgrad_weight"].toTensor(), bytes);
  return torch::Tensor();
}

// The product in libtorch's kernels for what oneDNN does not take (float64, autocast's
// bf16/fp16, CUDA), used only when its weight gradient is deferred (otherwise
// torch::linear runs): the operands in the compute dtype autocast would pick (float64 is
// never cast), y = b + x Wᵀ as one addmm like torch::linear's; the backward returns dx in
// x's dtype and db in b's, as autocast's casts would.
torch::Tensor deferred_forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b) {
  const AutocastState ac = AutocastGuard::current();
  const bool cast = ac.on && x.device().type() == ac.device && x.scalar_type() != torch::kFloat64;
  const at::ScalarType ct = cast ? ac.dtype : x.scalar_type();
  const std::int64_t k = w.size(1), n = w.size(0);
  const torch::Tensor x2 = x.reshape({-1, k}).to(ct).contiguous(), wc = w.to(ct);
  torch::Tensor y = b.defined() ? torch::addmm(b.to(ct), x2, wc.t()) : torch::mm(x2, wc.t());
  ctx->save_for_backward({x2, wc});
  ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
  if (b.defined()) ctx->saved_data["b_dtype"] = static_cast<std::int64_t>(b.scalar_type());
  tie_to_queue(ctx, w);
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = n;
  return y.view(shape);
}

torch::autograd::variable_list deferred_backward(AutogradContext* ctx, const torch::Tensor& grad, bool bias) {
  const auto saved = ctx->get_saved_variables();
  const torch::Tensor x2 = saved[0], wc = saved[1];
  const std::int64_t m = x2.size(0), k = x2.size(1), n = wc.size(0);
  const torch::Tensor dy = grad.reshape({m, n}).to(x2.scalar_type()).contiguous();
  torch::Tensor dx, dw, db;
  if (ctx->needs_input_grad(0)) {
    std::vector<std::int64_t> shape = grad.sizes().vec();
    shape.back() = k;
    dx = dy.mm(wc).to(static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt())).view(shape);
  }
  if (ctx->needs_input_grad(1))
    dw = weight_grad(ctx, [x2, dy] { return dy.t().mm(x2); }, x2.nbytes() + dy.nbytes());
  if (!bias) return {dx, dw};
  if (ctx->needs_input_grad(2)) db = dy.sum(0).to(static_cast<at::ScalarType>(ctx->saved_data["b_dtype"].toInt()));
  return {dx, dw, db};
}

struct DeferredLinear : public torch::autograd::Function<DeferredLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b) {
    return deferred_forward(ctx, x, w, b);
  }
  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grad) {
    return deferred_backward(ctx, grad[0], true);
  }
};

struct DeferredProduct : public torch::autograd::Function<DeferredProduct> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w) {
    return deferred_forward(ctx, x, w, torch::Tensor());
  }
  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grad) {
    return deferred_backward(ctx, grad[0], false);
  }
};

}  // namespace

bool linear_uses_onednn(const torch::Tensor& x, const torch::Tensor& w) {
  return fused_kernels_apply(x) && fused_kernels_apply(w) && w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1);
}

#ifdef HARP_WITH_ONEDNN
namespace {

// C[m, n] = op(A) op(B) + beta C with every matrix row-major and contiguous, on torch's
// intra-op threads as oneDNN splits it. (Bands of C's rows, one per thread, each
// computed alone, measured slower at two threads: every thread packs all of B.)
void dense_sgemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b,
                 float beta, float* c) {
  sgemm(ta, tb, m, n, k, 1.0f, a, ta == 'N' ? k : m, b, tb == 'N' ? n : k, beta, c, n);
}

// y[m, n] = the bias in every row (what libtorch's copy of an expanded tensor does, at
// a tenth of its time here).
void fill_rows(float* y, const float* bias, std::int64_t m, std::int64_t n) {
  at::parallel_for(0, m, 64, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) std::copy(bias, bias + n, y + i * n);
  });
}

// y = x Wᵀ + b over the rows of x; the backward's products in the same kernels. Two
// autograd functions share it, with and without the bias: libtorch 1.13's
// Function::apply refuses an undefined input.
torch::Tensor product_forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b) {
  const std::int64_t k = w.size(1), n = w.size(0);
  const torch::Tensor x2 = x.reshape({-1, k}).contiguous(), wc = w.contiguous();
  const std::int64_t m = x2.size(0);
  torch::Tensor y;
  float beta = 0.0f;
  y = torch::empty({m, n}, x2.options());
  if (b.defined()) {  // the bias rows first, then the product added onto them
    fill_rows(y.data_ptr<float>(), b.contiguous().data_ptr<float>(), m, n);
    beta = 1.0f;
  }
  dense_sgemm('N', 'T', m, n, k, x2.data_ptr<float>(), wc.data_ptr<float>(), beta, y.data_ptr<float>());
  ctx->save_for_backward({x2, wc});
  tie_to_queue(ctx, w);
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = n;
  return y.view(shape);
}

// {dx, dW, db} (each undefined where not needed; db only with a bias).
torch::autograd::variable_list product_backward(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad,
                                                bool bias) {
  const auto saved = ctx->get_saved_variables();
  const torch::Tensor &x2 = saved[0], &w = saved[1];
  const std::int64_t m = x2.size(0), k = x2.size(1), n = w.size(0);
  const torch::Tensor dy = grad.reshape({m, n}).contiguous();
  torch::Tensor dx, dw, db;
  if (ctx->needs_input_grad(0)) {
    dx = torch::empty({m, k}, dy.options());
    dense_sgemm('N', 'N', m, k, n, dy.data_ptr<float>(), w.data_ptr<float>(), 0.0f, dx.data_ptr<float>());
    std::vector<std::int64_t> shape = grad.sizes().vec();
    shape.back() = k;
    dx = dx.view(shape);
  }
  if (ctx->needs_input_grad(1)) {
    dw = weight_grad(
        ctx,
        [x2, dy, n, k, m] {
          torch::Tensor out = torch::empty({n, k}, dy.options());
          dense_sgemm('T', 'N', n, k, m, dy.data_ptr<float>(), x2.data_ptr<float>(), 0.0f, out.data_ptr<float>());
          return out;
        },
        x2.nbytes() + dy.nbytes());
  }
  if (!bias) return {dx, dw};
  if (ctx->needs_input_grad(2)) db = dy.sum(0);
  return {dx, dw, db};
}

struct OnednnLinear : public torch::autograd::Function<OnednnLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b) {
    return product_forward(ctx, x, w, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return product_backward(ctx, grad[0], true);
  }
};

struct OnednnProduct : public torch::autograd::Function<OnednnProduct> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w) {
    return product_forward(ctx, x, w, torch::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return product_backward(ctx, grad[0], false);
  }
};

}  // namespace
#endif

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
#ifdef HARP_WITH_ONEDNN
  if (linear_uses_onednn(x, w) && (!b.defined() || (b.device().is_cpu() && b.scalar_type() == torch::kFloat32)))
    return b.defined() ? OnednnLinear::apply(x, w, b) : OnednnProduct::apply(x, w);
#endif
  if (DeferWeightGrads::current() != nullptr && w.is_leaf() && w.requires_grad() && torch::GradMode::is_enabled())
    return b.defined() ? DeferredLinear::apply(x, w, b) : DeferredProduct::apply(x, w);
  return torch::linear(x, w, b);
}

}  // namespace harp::runtime
