// What gpt.cc, gpt_tp.cc and attention.cc share inside the runtime: the block pieces' bits
// (a layer's `pieces`), the low-precision test and libtorch's attention. Not a public header.
#pragma once

#include <torch/torch.h>

namespace harp::runtime {

enum Piece { kAttnIn = 1, kAttnOut = 2, kMlpIn = 4, kMlpOut = 8 };

// A bf16 or fp16 tensor (a product under bf16 autocast, or a cut tensor on a bf16 wire),
// whose softmax and LayerNorm run in float32.
inline bool low_precision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

// softmax(q kᵀ / √d + causal mask) v for q, k, v of [b, heads, s, d] on libtorch's
// operations (attention.cc), returning [b, heads, s, d]. With `recompute` (selective
// recomputation) and a graph being built, only q, k and v are kept and the backward
// reruns the forward: gradients bit for bit those of the kept version on the CPU.
torch::Tensor libtorch_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        bool recompute);

}  // namespace harp::runtime
