// What gpt.cc and gpt_tp.cc share inside the runtime: the block pieces' bits (a layer's
// `pieces`) and the low-precision test. Not a public header.
#pragma once

#include <torch/torch.h>

namespace harp::runtime {

enum Piece { kAttnIn = 1, kAttnOut = 2, kMlpIn = 4, kMlpOut = 8 };

// A bf16 or fp16 tensor (a product under bf16 autocast, or a cut tensor on a bf16 wire),
// whose softmax and LayerNorm run in float32.
inline bool low_precision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

}  // namespace harp::runtime
