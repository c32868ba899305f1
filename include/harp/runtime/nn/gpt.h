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
//
// Tensor parallelism (Megatron-LM's layers, tp ranks of one replica): the attention's
// q, k, v projections and the MLP's first projection (GPT fc1; LLaMA gate and up) are
// split by output features (columns of A = rows of W), each rank holding heads / tp
// query heads (kv_heads / tp key/value heads) and ffn / tp activations; the attention
// output and the MLP's second projection are split by input features, their partial
// products summed by an all-reduce (g), then the replicated bias added once. The input
// of a column-parallel projection passes through f (identity forward, all-reduce of the
// gradient backward). The token embedding and the LM head are split by vocabulary rows
// (ceil(V / tp) per rank, the last rank fewer): the embedding zeroes the ids outside its
// rows and g sums; the cross-entropy runs on the vocabulary shards with two all-reduces
// over tokens (each rank's maximum with the target logit, then the sum of exponentials),
// never gathering the logits. Norms, position embeddings and the row-parallel biases are replicated; they
// get the same gradient on every tp rank. A layer's cut tensor after attn_in or mlp_in is
// sharded on a tp rank (its heads or activations, then the full residual): full_cut()
// gathers it into the layout above where a stage sends it, local_cut() takes a rank's part
// where a stage receives it. Initialisation draws the full tensor and keeps the shard, so
// every tp degree starts from the same weights.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harp/model/model_spec.h"

namespace harp::runtime {

// A replica's tensor-parallel group as a layer sees it.
struct TensorParallel {
  int size = 1, rank = 0;
  // Sums a contiguous tensor over the group in place (Transport::allreduce_tp; on CUDA
  // the stream waits for it, the host does not).
  std::function<void(torch::Tensor&)> allreduce;
};

// Where a parameter's local part lies in its full (global) tensor: the local tensor is
// the full tensor's slices [offset, offset + length) along `dim`, concatenated in order;
// dim -1: replicated (the local tensor is the full one).
struct Shard {
  std::vector<std::int64_t> full_shape;
  int dim = -1;
  std::vector<std::pair<std::int64_t, std::int64_t>> slices;  // (offset, length)

  bool split() const { return dim >= 0; }
  torch::Tensor take(const torch::Tensor& full) const;              // the local part of `full`
  void add_to(const torch::Tensor& local, torch::Tensor& full) const;  // full[slices] += local
};

// One layer of the sequence. Parameter names are global ("block3.attn.qkv.weight"), so
// a checkpoint written by one layout loads into another. LLaMA's: embed.token.weight;
// blockN.ln1.weight, blockN.attn.{q,k,v,proj}.weight, blockN.ln2.weight,
// blockN.mlp.{gate,up,down}.weight; head.norm.weight, head.lm.weight.
class GptLayerImpl : public torch::nn::Module {
 public:
  // `tp` null: no tensor parallelism. REQUIRES: tp->size divides heads, kv_heads and
  // ffn_hidden, and vocab > (size - 1) ceil(vocab / size) (check_plan_matches_model).
  GptLayerImpl(const model::GptConfig& config, const model::Layer& layer,
               std::shared_ptr<const TensorParallel> tp = nullptr);
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
  // Every parameter's place in its full tensor, by global name.
  const std::map<std::string, Shard>& shards() const { return shards_; }
  // The layer's output as the cut tensor the spec describes (gathering a tp rank's
  // heads or activations after attn_in or mlp_in), and the layer's input from that cut
  // tensor (this rank's part). Identity without tensor parallelism or at other cuts.
  torch::Tensor full_cut(const torch::Tensor& local) const;
  torch::Tensor local_cut(const torch::Tensor& full) const;

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
  // LLaMA's rotary embedding of x ([b, heads, s, d], or [b, s, heads, d] when
  // `tokens_first`) at positions 0..s-1, with the cos and sin tables of its length, dtype
  // and device made once (in float64 on the CPU, then cast and copied: the values every
  // call computed before) and kept on the device.
  torch::Tensor rotary(const torch::Tensor& x, bool tokens_first) const;

  int tp_size() const { return tp_ ? tp_->size : 1; }
  // g alone: the sum over the tp group forward, identity backward.
  torch::Tensor tp_sum(const torch::Tensor& x) const;
  // Column-parallel input (f) and row-parallel output (g, then the bias) of a projection.
  torch::Tensor column_input(const torch::Tensor& x) const;
  torch::Tensor row_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const;
  // The tail's loss sum over vocabulary shards (tp > 1).
  torch::Tensor vocab_parallel_loss(const torch::Tensor& logits, const torch::Tensor& targets) const;
  // The full widths of the sharded columns of this layer's output (first == false) or
  // input (first == true) cut tensor; empty where the cut tensor is not sharded.
  std::vector<std::int64_t> sharded_widths(bool input) const;

  model::GptConfig config_;
  model::Layer layer_;
  std::shared_ptr<const TensorParallel> tp_;
  std::int64_t vocab_begin_ = 0, vocab_end_ = 0;  // this rank's vocabulary rows
  std::map<std::string, Shard> shards_;
  bool recompute_attention_ = false;
  // rotary()'s cos and sin ([s, d]) by (s, dtype, device); a backward's recomputation on
  // another thread may read them too.
  mutable std::mutex rotary_mu_;
  mutable std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> rotary_tables_;
  // submodules registered by name; see gpt.cc
};
TORCH_MODULE(GptLayer);

// Builds layers [first, last) with the weights every layout gives them (see above).
// dtype: torch::kFloat32 or torch::kFloat64. `tp`: this rank's tensor-parallel group.
std::vector<GptLayer> build_gpt_layers(const model::ModelSpec& model, int first, int last,
                                       std::uint64_t seed, torch::Dtype dtype,
                                       const torch::Device& device,
                                       std::shared_ptr<const TensorParallel> tp = nullptr);

// The rows [begin, end) of a vocabulary of `vocab` that tp rank `rank` of `size` holds.
std::pair<std::int64_t, std::int64_t> vocab_rows(std::int64_t vocab, int size, int rank);

// All named parameters of `layers` with global names, in layer order.
std::vector<std::pair<std::string, torch::Tensor>> named_parameters(const std::vector<GptLayer>& layers);

}  // namespace harp::runtime
