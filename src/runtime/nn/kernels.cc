// The fused CPU kernels (see kernels.h).
#include "harp/runtime/nn/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <ATen/Parallel.h>

#include "cpu_gemm.h"
#include "harp/common/check.h"
#include "harp/runtime/nn/gemm.h"
#include "harp/runtime/nn/precision.h"

// The loops below are written to vectorise; on x86-64 each is compiled three times
// (AVX-512, AVX2 with FMA, baseline SSE2) and the loader picks the CPU's best.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HARP_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HARP_VECTOR_CLONES
#endif

namespace harp::runtime {
namespace {

// e^x for x in [-87.3, 88.7] (clamped outside), Cephes' expf: x = n ln 2 + r with
// |r| <= ln 2 / 2, e^r by a degree-6 polynomial, 2^n through the exponent bits. Written
// without branches or library calls so that loops over it vectorise.
__attribute__((always_inline)) inline float exp_approx(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

constexpr float kGeluAlpha = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluBeta = 0.044715f;

// y = x σ(2u), u = √(2/π) (x + 0.044715 x³).
HARP_VECTOR_CLONES void gelu_forward_span(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluAlpha * (v + kGeluBeta * v * v * v);
    y[i] = v / (1.0f + exp_approx(-2.0f * u));
  }
}

// dx = dy (σ + x σ (1 - σ) 2u'), σ = σ(2u), u' = √(2/π) (1 + 3 0.044715 x²).
HARP_VECTOR_CLONES void gelu_backward_span(const float* x, const float* dy, float* dx, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluAlpha * (v + kGeluBeta * v * v * v);
    const float sig = 1.0f / (1.0f + exp_approx(-2.0f * u));
    const float du = kGeluAlpha * (1.0f + 3.0f * kGeluBeta * v * v);
    dx[i] = dy[i] * (sig + v * sig * (1.0f - sig) * 2.0f * du);
  }
}

constexpr std::int64_t kElementGrain = 1 << 14;

struct GeluTanh : public torch::autograd::Function<GeluTanh> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    const torch::Tensor xc = x.contiguous();
    torch::Tensor y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, xc.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      gelu_forward_span(in + begin, out + begin, end - begin);
    });
    ctx->save_for_backward({xc});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor dy = grad[0].contiguous();
    torch::Tensor dx = torch::empty_like(x);
    const float *in = x.data_ptr<float>(), *g = dy.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
      gelu_backward_span(in + begin, g + begin, out + begin, end - begin);
    });
    return {dx};
  }
};

#ifdef HARP_WITH_ONEDNN

// Each row i of the scores [s, s] becomes softmax over columns j <= i, zero beyond.
HARP_VECTOR_CLONES void causal_softmax_rows(float* p, std::int64_t s) {
  for (std::int64_t i = 0; i < s; ++i) {
    float* row = p + i * s;
    float m = row[0];
#pragma omp simd reduction(max : m)
    for (std::int64_t j = 1; j <= i; ++j) m = row[j] > m ? row[j] : m;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j <= i; ++j) {
      row[j] = exp_approx(row[j] - m);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
    for (std::int64_t j = i + 1; j < s; ++j) row[j] = 0.0f;
  }
}

// The scores' gradient from the probabilities' (in place): dS = P ∘ (dP - rowsum(P ∘ dP)).
HARP_VECTOR_CLONES void causal_softmax_backward_rows(const float* p, float* dp, std::int64_t s) {
  for (std::int64_t i = 0; i < s; ++i) {
    const float* pr = p + i * s;
    float* dr = dp + i * s;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
#pragma omp simd
    for (std::int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
    for (std::int64_t j = i + 1; j < s; ++j) dr[j] = 0.0f;
  }
}

// One of q, k, v (or a gradient laid out like it): element (sample, token, head, e) at
// data[sample * sb + token * st + head * sh + e].
struct Heads {
  float* data;
  std::int64_t sb, st, sh;
  float* at(std::int64_t sample, std::int64_t head) const { return data + sample * sb + head * sh; }
};

Heads heads_of(const torch::Tensor& t) {  // t: [b, s, n, d] with unit stride along d
  HARP_CHECK_EQ(t.stride(3), 1) << "attention operands need unit stride along the head dimension";
  return Heads{t.data_ptr<float>(), t.stride(0), t.stride(1), t.stride(2)};
}

struct Shape {
  std::int64_t b, s, heads, kv_heads, d;
  float scale;
};

// probs [s, s] = causal softmax of scale q kᵀ for (sample, head).
void head_probabilities(const Shape& n, const Heads& q, const Heads& k, std::int64_t sample, std::int64_t head,
                        float* probs) {
  const std::int64_t kv = head / (n.heads / n.kv_heads);
  sgemm('N', 'T', n.s, n.s, n.d, n.scale, q.at(sample, head), q.st, k.at(sample, kv), k.st, 0.0f, probs, n.s);
  causal_softmax_rows(probs, n.s);
}

// context [b, s, heads d] = probs v for every (sample, head); the probabilities kept in
// `kept` [b, heads, s, s] unless it is null.
void attention_forward(const Shape& n, const Heads& q, const Heads& k, const Heads& v, float* context, float* kept) {
  at::parallel_for(0, n.b * n.heads, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch(kept == nullptr ? n.s * n.s : 0);
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t sample = task / n.heads, head = task % n.heads;
      float* probs = kept != nullptr ? kept + task * n.s * n.s : scratch.data();
      head_probabilities(n, q, k, sample, head, probs);
      const std::int64_t kv = head / (n.heads / n.kv_heads);
      sgemm('N', 'N', n.s, n.d, n.s, 1.0f, probs, n.s, v.at(sample, kv), v.st, 0.0f,
            context + sample * n.s * n.heads * n.d + head * n.d, n.heads * n.d);
    }
  });
}

// dq, dk, dv (laid out as `dq`, `dk`, `dv` say; every element written) from the
// context's gradient; `kept` as attention_forward left it, or null to recompute.
void attention_backward(const Shape& n, const Heads& q, const Heads& k, const Heads& v, const float* kept,
                        const float* dcontext, const Heads& dq, const Heads& dk, const Heads& dv) {
  const std::int64_t group = n.heads / n.kv_heads, ld = n.heads * n.d;
  // One task per (sample, key/value head): the query heads sharing it add into its
  // gradients in order, on one thread.
  at::parallel_for(0, n.b * n.kv_heads, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> probs_buffer(kept == nullptr ? n.s * n.s : 0), ds(n.s * n.s);
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t sample = task / n.kv_heads, kv = task % n.kv_heads;
      for (std::int64_t g = 0; g < group; ++g) {
        const std::int64_t head = kv * group + g;
        const float* probs = kept + (sample * n.heads + head) * n.s * n.s;
        if (kept == nullptr) {
          head_probabilities(n, q, k, sample, head, probs_buffer.data());
          probs = probs_buffer.data();
        }
        const float* dout = dcontext + sample * n.s * ld + head * n.d;
        const float beta = g == 0 ? 0.0f : 1.0f;
        // dv += pᵀ dout; dp = dout vᵀ; ds = p ∘ (dp - rowsum(p ∘ dp)).
        sgemm('T', 'N', n.s, n.d, n.s, 1.0f, probs, n.s, dout, ld, beta, dv.at(sample, kv), dv.st);
        sgemm('N', 'T', n.s, n.s, n.d, 1.0f, dout, ld, v.at(sample, kv), v.st, 0.0f, ds.data(), n.s);
        causal_softmax_backward_rows(probs, ds.data(), n.s);
        // dq = scale ds k; dk += scale dsᵀ q.
        sgemm('N', 'N', n.s, n.d, n.s, n.scale, ds.data(), n.s, k.at(sample, kv), k.st, 0.0f, dq.at(sample, head), dq.st);
        sgemm('T', 'N', n.s, n.d, n.s, n.scale, ds.data(), n.s, q.at(sample, head), q.st, beta, dk.at(sample, kv),
              dk.st);
      }
    }
  });
}

Shape shape_of(const torch::Tensor& q, const torch::Tensor& k) {
  Shape n{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), 0.0f};
  HARP_CHECK(n.kv_heads > 0 && n.heads % n.kv_heads == 0) << "kv_heads " << n.kv_heads << " must divide heads " << n.heads;
  n.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n.d)));
  return n;
}

// The packed layout's three views [b, s, n, d] of qkv [b, s, (heads + 2 kv_heads) d].
std::vector<torch::Tensor> unpack(const torch::Tensor& qkv, std::int64_t heads, std::int64_t kv_heads) {
  const std::int64_t b = qkv.size(0), s = qkv.size(1), d = qkv.size(2) / (heads + 2 * kv_heads);
  return {qkv.narrow(2, 0, heads * d).view({b, s, heads, d}),
          qkv.narrow(2, heads * d, kv_heads * d).view({b, s, kv_heads, d}),
          qkv.narrow(2, (heads + kv_heads) * d, kv_heads * d).view({b, s, kv_heads, d})};
}

torch::Tensor forward_into(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v, bool recompute) {
  const Shape n = shape_of(q, k);
  torch::Tensor context = torch::empty({n.b, n.s, n.heads * n.d}, q.options());
  torch::Tensor kept = recompute ? torch::Tensor() : torch::empty({n.b, n.heads, n.s, n.s}, q.options());
  attention_forward(n, heads_of(q), heads_of(k), heads_of(v), context.data_ptr<float>(),
                    recompute ? nullptr : kept.data_ptr<float>());
  ctx->saved_data["recompute"] = recompute;
  if (!recompute) ctx->saved_data["probs"] = kept;  // not an input or output: no version check needed
  return context;
}

// The gradients of q, k, v into dq, dk, dv (views of one packed tensor, or three).
void backward_into(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                   const torch::Tensor& v, const torch::Tensor& dcontext, const torch::Tensor& dq,
                   const torch::Tensor& dk, const torch::Tensor& dv) {
  const Shape n = shape_of(q, k);
  const torch::Tensor dc = dcontext.contiguous();
  const bool recompute = ctx->saved_data["recompute"].toBool();
  const torch::Tensor kept = recompute ? torch::Tensor() : ctx->saved_data["probs"].toTensor();
  attention_backward(n, heads_of(q), heads_of(k), heads_of(v), recompute ? nullptr : kept.data_ptr<float>(),
                     dc.data_ptr<float>(), heads_of(dq), heads_of(dk), heads_of(dv));
}

struct CausalAttention : public torch::autograd::Function<CausalAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, bool recompute) {
    ctx->save_for_backward({q, k, v});
    return forward_into(ctx, q, k, v, recompute);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor dq = torch::empty(saved[0].sizes(), saved[0].options());
    torch::Tensor dk = torch::empty(saved[1].sizes(), saved[1].options());
    torch::Tensor dv = torch::empty(saved[2].sizes(), saved[2].options());
    backward_into(ctx, saved[0], saved[1], saved[2], grad[0], dq, dk, dv);
    return {dq, dk, dv, torch::Tensor()};
  }
};

struct PackedCausalAttention : public torch::autograd::Function<PackedCausalAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv, std::int64_t heads,
                               std::int64_t kv_heads, bool recompute) {
    ctx->save_for_backward({qkv});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    const auto parts = unpack(qkv, heads, kv_heads);
    return forward_into(ctx, parts[0], parts[1], parts[2], recompute);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const torch::Tensor qkv = ctx->get_saved_variables()[0];
    const std::int64_t heads = ctx->saved_data["heads"].toInt(), kv_heads = ctx->saved_data["kv_heads"].toInt();
    torch::Tensor dqkv = torch::empty({qkv.size(0), qkv.size(1), qkv.size(2)}, qkv.options());
    const auto parts = unpack(qkv, heads, kv_heads), dparts = unpack(dqkv, heads, kv_heads);
    backward_into(ctx, parts[0], parts[1], parts[2], grad[0], dparts[0], dparts[1], dparts[2]);
    return {dqkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

#endif  // HARP_WITH_ONEDNN

}  // namespace

bool fused_kernels_apply(const torch::Tensor& t) {
  return onednn_available() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && !AutocastGuard::active();
}

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  HARP_CHECK(fused_kernels_apply(x)) << "gelu_tanh takes float32 CPU tensors";
  return GeluTanh::apply(x);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool recompute) {
  HARP_CHECK(fused_kernels_apply(q) && q.dim() == 4 && k.dim() == 4 && v.dim() == 4)
      << "causal_attention takes float32 CPU tensors [b, s, heads, d]";
#ifdef HARP_WITH_ONEDNN
  // Without a graph (evaluation) nothing is kept for a backward.
  return CausalAttention::apply(q, k, v, recompute || !torch::GradMode::is_enabled());
#else
  (void)k, (void)v, (void)recompute;
  return {};
#endif
}

torch::Tensor causal_attention_packed(const torch::Tensor& qkv, int heads, int kv_heads, bool recompute) {
  HARP_CHECK(fused_kernels_apply(qkv) && qkv.dim() == 3 && qkv.size(2) % (heads + 2 * kv_heads) == 0)
      << "causal_attention_packed takes a float32 CPU tensor [b, s, (heads + 2 kv_heads) d]";
#ifdef HARP_WITH_ONEDNN
  return PackedCausalAttention::apply(qkv, static_cast<std::int64_t>(heads), static_cast<std::int64_t>(kv_heads),
                                      recompute || !torch::GradMode::is_enabled());
#else
  (void)recompute;
  return {};
#endif
}

}  // namespace harp::runtime
