// Causal attention where the fused CPU kernel (kernels.h) does not apply (gpt_pieces.h):
// libtorch's scaled_dot_product_attention on CUDA (flash, cuDNN or memory-efficient: no
// s x s scores kept, grouped-query heads read without copies) and for the CPU's float64
// and float32 without oneDNN; and, for the CPU's bf16 and fp16 autocast, matmul, a
// float32 softmax and matmul, with selective recomputation as an autograd function that
// keeps only q, k, v. Measured on this CPU (docs/runtime.md, "Attention"): SDPA is
// 1.4-3.8x faster in float64 with the same values, and in bf16 as fast at s = 256 but
// 2.3x slower at s = 64, so the CPU's bf16 keeps its own path.
#include <cmath>
#include <limits>

#include "gpt_pieces.h"
#include "harp/runtime/nn/precision.h"

namespace harp::runtime {
namespace {

// softmax(scale · scores + causal mask) over the last dimension for low-precision (bf16,
// fp16) scores [.., s, s], computed in float32 and returned in the scores' dtype, keeping
// only that low-precision output for the backward: Megatron's fused scale, upper-
// triangular mask and softmax. libtorch's operations kept the float32 probabilities and
// the product with v a low-precision copy (6 bytes per score where this keeps 2), and
// the backward went through the mask's and the scale's own steps.
struct ScaledCausalSoftmax : public torch::autograd::Function<ScaledCausalSoftmax> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& scores, double scale) {
    const std::int64_t s = scores.size(-1);
    const torch::Tensor future = torch::ones({s, s}, scores.options().dtype(torch::kBool)).triu(1);
    torch::Tensor y = torch::empty_like(scores, at::MemoryFormat::Contiguous);
    // A sample at a time: the float32 working copy is one sample's, not the batch's.
    for (std::int64_t i = 0; i < scores.size(0); ++i) {
      torch::Tensor t = scores[i].to(torch::kFloat);
      t.mul_(scale).masked_fill_(future, -std::numeric_limits<float>::infinity());
      y[i].copy_(torch::softmax(t, -1));
    }
    ctx->save_for_backward({y});
    ctx->saved_data["scale"] = scale;
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    // libtorch's softmax backward (it sums in float32) on the low-precision tensors; the
    // masked entries' probabilities are 0, and so are their gradients.
    const torch::Tensor y = ctx->get_saved_variables()[0];
    torch::Tensor g = at::_softmax_backward_data(grad[0].to(y.scalar_type()).contiguous(), y, -1, y.scalar_type());
    return {g.mul_(ctx->saved_data["scale"].toDouble()), torch::Tensor()};
  }
};

// softmax(q k^T / sqrt(d) + causal mask) v for q, k, v of [b, heads, s, d].
torch::Tensor libtorch_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const std::int64_t s = q.size(-2);
  const double root_d = std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1));
  // Under autocast the scores come out of a bf16 (fp16) product: the softmax runs in
  // float32 (its sums lose too much in bf16) and keeps its output in bf16.
  if (low_precision(scores)) return torch::matmul(ScaledCausalSoftmax::apply(scores, 1.0 / root_d), v);
  scores = scores / root_d;
  const auto mask_options = torch::TensorOptions().dtype(torch::kBool).device(q.device());
  scores = scores.masked_fill(torch::ones({s, s}, mask_options).triu(1), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

// libtorch_attention that keeps only its inputs: the backward reruns it under autograd and
// differentiates that (the same operations on the same values: the gradients of the
// kept version bit for bit on the CPU).
struct RecomputedAttention : public torch::autograd::Function<RecomputedAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v) {
    ctx->save_for_backward({q, k, v});
    const AutocastState autocast = AutocastGuard::current();  // rerun in the forward's precision
    ctx->saved_data["autocast"] = autocast.on;
    ctx->saved_data["autocast_device"] = static_cast<std::int64_t>(autocast.device);
    ctx->saved_data["autocast_dtype"] = static_cast<std::int64_t>(autocast.dtype);
    return libtorch_attention(q, k, v);  // Function::apply runs this without a graph
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    torch::autograd::variable_list in;
    for (const auto& t : saved) in.push_back(t.detach().requires_grad_(true));
    torch::AutoGradMode enable(true);
    torch::Tensor out;
    {
      AutocastGuard autocast(AutocastState{ctx->saved_data["autocast"].toBool(),
                                           static_cast<c10::DeviceType>(ctx->saved_data["autocast_device"].toInt()),
                                           static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt())});
      out = libtorch_attention(in[0], in[1], in[2]);
    }
    return torch::autograd::grad({out}, in, {grad[0]});
  }
};

}  // namespace

torch::Tensor sdpa_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/k.size(1) != q.size(1));
}

torch::Tensor libtorch_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        bool recompute) {
  torch::Tensor keys = k, values = v;
  if (k.size(1) != q.size(1)) {  // grouped-query attention: query head i reads key/value head i / (a / g)
    keys = k.repeat_interleave(q.size(1) / k.size(1), 1);
    values = v.repeat_interleave(q.size(1) / k.size(1), 1);
  }
  if (recompute && torch::GradMode::is_enabled()) return RecomputedAttention::apply(q, keys, values);
  return libtorch_attention(q, keys, values);
}

torch::Tensor causal_attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool recompute, int window) {
  const std::int64_t s = q.size(-2);
  if (window > 0 && window < s)  // a sliding window: SDPA with the mask, on every device
    return at::scaled_dot_product_attention(q, k, v, attention_allowed(0, s, s, window, q.device()), 0.0,
                                            /*is_causal=*/false, std::nullopt, /*enable_gqa=*/k.size(1) != q.size(1));
  // SDPA keeps q, k, v, its output and the log-sum-exp, nothing of s x s: selective
  // recomputation has nothing left to free there.
  if (!(q.is_cpu() && low_precision(q))) return sdpa_causal_attention(q, k, v);
  return libtorch_causal_attention(q, k, v, recompute);
}

}  // namespace harp::runtime
