// The GPT and LLaMA models in libtorch, cut into the same fine-grained layer sequence as
// the model spec (model/model_spec.h): layer 0 the embeddings, then k sub-layers per
// block, then the tail (final norm, LM head, cross-entropy). Any cut the planner makes
// can be executed: the tensor crossing a cut is what the spec's output_bytes counts.
//
// Tensors crossing cuts (b samples, s tokens, h hidden, f ffn, kv = kv_heads x head
// size; kv = h for GPT), dtype = the model's:
//   after embed / attn_out / mlp_out / a whole block: the hidden state [b, s, h]
//   after attn_in: q, k, v and the residual concatenated:   [b, s, h + 2kv + h]
//   after mlp_in:  GELU(FC1) (GPT) or SiLU(gate) * up (LLaMA) and the residual: [b, s, f + h]
// The head takes token ids [b, s] (int64); the tail takes the hidden state and the
// targets [b, s] (int64) and returns the *sum* of token cross-entropies (the caller
// divides by the global token count, so microbatches and replicas add up exactly).
//
// GPT: pre-LayerNorm blocks with biases, learned positions, causal self-attention, GELU
// (tanh) MLP. LLaMA: pre-RMSNorm blocks (eps 1e-5, computed in float32 at least), no
// biases, rotary positions in the Hugging Face layout (rotate_half) applied to q and k
// in attn_out, grouped-query attention (query head i reads key/value head i / (heads /
// kv_heads)), SwiGLU MLP, untied LM head. Neither has dropout. Initialisation: GPT-2
// style (normal 0.02, residual projections scaled by 1/sqrt(2R), norms at 1). Each
// (block, piece) draws from its own generator derived from the seed, in float64 on the
// CPU, then casts: every layout, granularity and device starts from identical weights, a
// rank allocates only its layers, and the global RNG is untouched.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harp/model/model_spec.h"

namespace harp::runtime {

// The norms' epsilon (GPT-2's layer_norm_epsilon; LLaMA-2's and LLaMA-3's rms_norm_eps),
// also written into exported config.json files.
inline constexpr double kLayerNormEps = 1e-5;
inline constexpr double kRmsNormEps = 1e-5;

// One layer of the sequence. Parameter names are global ("block3.attn.qkv.weight"), so
// a checkpoint written by one layout loads into another. LLaMA's: embed.token.weight;
// blockN.ln1.weight, blockN.attn.{q,k,v,proj}.weight, blockN.ln2.weight,
// blockN.mlp.{gate,up,down}.weight; head.norm.weight, head.lm.weight.
class GptLayerImpl : public torch::nn::Module {
 public:
  GptLayerImpl(const model::GptConfig& config, const model::Layer& layer);
  // Head: x = token ids [b, s]. Block parts: x = the incoming cut tensor. Tail: x = the
  // hidden state and `targets` the next tokens; returns the loss sum (a scalar).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& targets = {});
  const model::Layer& layer() const { return layer_; }
  // The token embedding (head) or LM head weight (tail) when embeddings are tied; the
  // tail's tied weight is a separate tensor kept equal to the head's by the runtime.
  torch::Tensor tied_weight() const;
  // Selective recomputation (common/recompute.h): the attention core keeps only q, k and
  // v, and the backward recomputes its scores and probabilities. Off by default.
  void set_recompute_attention(bool on) { recompute_attention_ = on; }

 private:
  // A block piece's output without the residual (forward() keeps it apart and adds it)
  // from its input `t` (q, k, v for attn_out; the activation for mlp_out) and, for
  // attn_in and mlp_in, the input's pre-norm; `w` looks up this block's weights by their
  // name below "blockN.".
  using Weights = std::function<torch::Tensor(const std::string&)>;
  torch::Tensor gpt_piece(int piece, const torch::Tensor& t, const torch::Tensor& normed, const Weights& w) const;
  torch::Tensor llama_piece(int piece, const torch::Tensor& t, const torch::Tensor& normed, const Weights& w) const;

  // softmax(q kᵀ / √d + causal mask) v, recomputed in the backward when selective.
  torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) const;

  model::GptConfig config_;
  model::Layer layer_;
  bool recompute_attention_ = false;
  // submodules registered by name; see gpt.cc
};
TORCH_MODULE(GptLayer);

// Builds layers [first, last) with the weights every layout gives them (see above).
// dtype: torch::kFloat32 or torch::kFloat64.
std::vector<GptLayer> build_gpt_layers(const model::ModelSpec& model, int first, int last,
                                       std::uint64_t seed, torch::Dtype dtype,
                                       const torch::Device& device);

// All named parameters of `layers` with global names, in layer order.
std::vector<std::pair<std::string, torch::Tensor>> named_parameters(const std::vector<GptLayer>& layers);

}  // namespace harp::runtime
