// The runtime's fused CPU kernels for the element-wise and attention parts of a block
// (the products are linear.h's). Each is an autograd function over float32 CPU tensors
// that does in one pass what libtorch eager does in several:
//
// - gelu_tanh: GELU with the tanh approximation, computed as x σ(2u) with
//   u = √(2/π) (x + 0.044715 x³) (the same function: ½ (1 + tanh u) = σ(2u)), with a
//   vectorised exponential (Cephes' polynomial, about 1 ulp), on torch's intra-op pool.
// - causal_attention: softmax(q kᵀ / √d + causal mask) v per (sample, head), each on one
//   thread of torch's pool with oneDNN's sgemm on the strided q, k and v as they lie in
//   the projection's output (no transposes, no copies), the scale folded into the first
//   product and the mask and softmax in one pass; the backward likewise, writing the
//   gradients of q, k and v in the layout they came in. Grouped-query attention reads
//   key/value head i / (heads / kv_heads) for query head i, without repeating k and v.
//   With `recompute` (selective recomputation) the probabilities are not kept: the
//   backward recomputes them with the same code, so the gradients are bit for bit those
//   of the kept version.
//
// A (sample, head) is always computed by one thread with the same kernels, so the
// attention's results do not depend on the thread count. Everything the kernels do not
// take (CUDA, float64, bf16 autocast, a build without oneDNN) stays on the libtorch
// operations (attention.cc); fused_kernels_apply says which, for linear.h's products too.
#pragma once

#include <torch/torch.h>

namespace harp::runtime {

// Whether the kernels below take `t`: a float32 CPU tensor outside autocast, in a build
// with oneDNN.
bool fused_kernels_apply(const torch::Tensor& t);

// torch::gelu(x, "tanh") up to float32 rounding. REQUIRES: fused_kernels_apply(x).
torch::Tensor gelu_tanh(const torch::Tensor& x);

// q [b, s, heads, d], k and v [b, s, kv_heads, d] (kv_heads divides heads), any strides
// with unit stride along d. Returns the context [b, s, heads * d] (heads side by side:
// what the attention's output projection takes). REQUIRES: fused_kernels_apply(q).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               bool recompute = false);

// The same over q, k and v packed side by side in one tensor [b, s, (heads + 2 kv_heads) d]
// (GPT's fused projection): its gradient comes back packed, in one tensor.
torch::Tensor causal_attention_packed(const torch::Tensor& qkv, int heads, int kv_heads, bool recompute = false);

}  // namespace harp::runtime
