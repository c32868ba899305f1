// What gpt.cc, gpt_tp.cc and attention.cc share inside the runtime: the block pieces' bits
// (a layer's `pieces`), the low-precision test and libtorch's attention. Not a public header.
#pragma once

#include <torch/torch.h>

#include "harp/model/model_spec.h"

namespace harp::runtime {

enum Piece { kAttnIn = 1, kAttnOut = 2, kMlpIn = 4, kMlpOut = 8 };

// A bf16 or fp16 tensor (a product under bf16 autocast, or a cut tensor on a bf16 wire),
// whose softmax and LayerNorm run in float32.
inline bool low_precision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

// softmax(q kᵀ / √d + causal mask) v for q of [b, a, s, d] and k, v of [b, g, s, d] (g
// divides a: grouped-query attention, query head i reading key/value head i / (a / g)),
// returning [b, a, s, d]: the attention core where the fused CPU kernel does not apply
// (attention.cc says which path runs where). With `recompute` (selective recomputation)
// and a graph being built, the CPU's bf16 path keeps only q, k and v and its backward
// reruns the forward (gradients bit for bit those of the kept version). `window` > 0: a
// query sees only the last `window` positions, its own included (Mistral); it runs
// libtorch's SDPA with that mask on every device.
torch::Tensor causal_attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool recompute, int window = 0);

// The parts of the LLaMA lineage the layers and generation share (parts.cc).
// RMSNorm as LLaMA computes it: in float32 at least, then cast back and scaled.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// The rotary inverse frequencies of a head of width d (float64, CPU): theta^(-2i/d), and
// under LLaMA 3.1's scaling (c.rope_scaling) those of long wavelengths divided by its
// factor and the middle band interpolated, as Hugging Face's rope_type llama3 does.
torch::Tensor rotary_inv_freq(const model::GptConfig& c, std::int64_t d);
// Which keys each of `queries` queries at positions first, first + 1, ... sees among keys
// at positions 0 .. keys - 1: [queries, keys], true where it attends (causal, within the
// window when `window` > 0).
torch::Tensor attention_allowed(std::int64_t first, std::int64_t queries, std::int64_t keys, int window,
                                const torch::Device& device);
// Its two paths, for the tests that hold them to each other: libtorch's
// scaled_dot_product_attention (causal; GQA without copies), and matmul, softmax and
// matmul (k and v repeated per query head).
torch::Tensor sdpa_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
torch::Tensor libtorch_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        bool recompute);

}  // namespace harp::runtime
