// The GPT layer sequence in libtorch (see gpt.h for the cut tensors). Each block piece maps
// (its input, the residual) to the next; a layer chains its pieces and joins the residual
// to the output only at its end, where a cut may be. So a layer holding two pieces
// computes exactly what two one-piece layers compute, without the copies of the joined
// tensor between them: any cut reproduces the unpartitioned forward bit for bit. Omits
// dropout. Attention is the fused CPU kernel (kernels.h) where it applies, else libtorch's
// scaled_dot_product_attention or, for the CPU's bf16, its plain operations (attention.cc).
#include "harp/runtime/nn/gpt.h"

#include <cmath>
#include <map>

#include <ATen/CPUGeneratorImpl.h>

#include "harp/common/check.h"
#include "gpt_pieces.h"
#include "harp/runtime/nn/kernels.h"
#include "harp/runtime/nn/linear.h"

namespace harp::runtime {
namespace {

constexpr int kPieces[] = {kAttnIn, kAttnOut, kMlpIn, kMlpOut};
constexpr double kInitStd = 0.02;
// Generator streams for the head and tail (block pieces use their piece bit).
constexpr int kEmbedStream = 16, kTailStream = 17;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One generator per (block, piece) rather than one global stream: a rank initialises
// only the layers it keeps, the weights do not depend on the granularity k or on the
// device (CUDA's RNG differs from the CPU's), and the global RNG is left untouched.
at::Generator init_generator(std::uint64_t seed, int block, int stream) {
  const auto key = static_cast<std::uint64_t>(block + 1) * 64 + static_cast<std::uint64_t>(stream);
  return at::detail::createCPUGenerator(splitmix64(seed ^ splitmix64(key)));
}

std::string block_prefix(int block) { return "block" + std::to_string(block) + "."; }

// Returns the child module `name` of `parent`, creating an empty one if needed; nested
// holders give global dotted names ("block3.attn.qkv.weight") without torch::nn::Linear,
// whose constructor would draw from the global RNG.
std::shared_ptr<torch::nn::Module> child(torch::nn::Module& parent, const std::string& name) {
  auto children = parent.named_children();
  if (const auto* found = children.find(name)) return *found;
  return parent.register_module(name, std::make_shared<torch::nn::Module>(name));
}

// Registers zero-filled float64 CPU parameters at a dotted path below `root`;
// build_gpt_layers fills them and converts dtype and device.
void add_param(torch::nn::Module& root, const std::string& path, torch::IntArrayRef shape) {
  torch::nn::Module* node = &root;
  std::shared_ptr<torch::nn::Module> holder;
  std::string rest = path;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    holder = child(*node, rest.substr(0, dot));
    node = holder.get();
    rest = rest.substr(dot + 1);
  }
  node->register_parameter(rest, torch::zeros(shape, torch::kFloat64));
}

// The logits' cross-entropy against `targets`, or the logits when there are none.
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets, std::int64_t vocab) {
  if (!targets.defined()) return logits;
  // A sum, not a mean: the caller divides once by the global token count, so losses and
  // gradients add up exactly across microbatches and data-parallel replicas.
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits.reshape({-1, vocab}), targets.reshape({-1}),
                          F::CrossEntropyFuncOptions().reduction(torch::kSum));
}

// How a parameter starts: normal(0, 0.02), normal with the residual scale, or 1 (norms);
// biases stay 0.
enum class Init { kNormal, kResidual, kOne, kZero };

// How tensor parallelism splits a parameter (gpt.h): not at all, by output features (dim
// 0, evenly), by input features (dim 1, evenly), GPT's fused q, k, v (each third of dim 0
// by heads), or by vocabulary rows (dim 0, ceil(V / tp) per rank).
enum class Split { kNone, kRows, kColumns, kQkvRows, kVocab };

struct ParamSpec {
  int stream;  // its generator: a piece bit, kEmbedStream (head) or kTailStream (tail)
  std::string name;
  std::vector<std::int64_t> shape;  // the full shape
  Init init;
  Split split;
};

// The parameters of one layer, in the order they are registered and drawn (each stream's
// draws in this order).
std::vector<ParamSpec> param_specs(const model::GptConfig& c, const model::Layer& layer) {
  const std::int64_t h = c.hidden, f = c.ffn_hidden, V = c.vocab, d = c.head_size();
  const bool llama = c.family == "llama";
  // The widths of q and of k (and v): heads x head size (hidden unless head_dim says).
  const std::int64_t qw = llama ? static_cast<std::int64_t>(c.heads) * d : h;
  const std::int64_t kv = llama ? static_cast<std::int64_t>(c.kv_heads) * d : h;
  std::vector<ParamSpec> out;
  auto add = [&](int stream, const std::string& name, std::vector<std::int64_t> shape, Init init,
                 Split split = Split::kNone) {
    out.push_back({stream, name, std::move(shape), init, split});
  };
  // A norm: LayerNorm's weight and bias, RMSNorm's weight.
  auto norm = [&](int stream, const std::string& prefix) {
    add(stream, prefix + ".weight", {h}, Init::kOne);
    if (!llama) add(stream, prefix + ".bias", {h}, Init::kZero);
  };
  auto bias = [&](int stream, const std::string& name, std::int64_t n, Split split = Split::kNone) {
    if (!llama) add(stream, name, {n}, Init::kZero, split);
  };
  switch (layer.kind) {
    case model::LayerKind::kHead:
      add(kEmbedStream, "embed.token.weight", {V, h}, Init::kNormal, Split::kVocab);
      if (!llama) add(kEmbedStream, "embed.position.weight", {c.seq_len, h}, Init::kNormal);
      break;
    case model::LayerKind::kTail:
      norm(kTailStream, llama ? "head.norm" : "head.ln_f");
      // Tied: a separate copy of the token embedding whose gradient the runtime sums
      // with the head's, so first and last stage may live on different ranks.
      add(kTailStream, "head.lm.weight", {V, h}, Init::kNormal, Split::kVocab);
      break;
    case model::LayerKind::kBlockPart: {
      const std::string p = block_prefix(layer.block);
      if (layer.pieces & kAttnIn) {
        norm(kAttnIn, p + "ln1");
        if (llama) {
          add(kAttnIn, p + "attn.q.weight", {qw, h}, Init::kNormal, Split::kRows);
          add(kAttnIn, p + "attn.k.weight", {kv, h}, Init::kNormal, Split::kRows);
          add(kAttnIn, p + "attn.v.weight", {kv, h}, Init::kNormal, Split::kRows);
          if (c.qkv_bias)  // Qwen2: biases on q, k and v (zeros, drawing nothing)
            for (const auto& [name, n] : {std::make_pair("q", qw), std::make_pair("k", kv), std::make_pair("v", kv)})
              add(kAttnIn, p + "attn." + name + ".bias", {n}, Init::kZero, Split::kRows);
        } else {
          add(kAttnIn, p + "attn.qkv.weight", {3 * h, h}, Init::kNormal, Split::kQkvRows);
          bias(kAttnIn, p + "attn.qkv.bias", 3 * h, Split::kQkvRows);
        }
      }
      if (layer.pieces & kAttnOut) {
        add(kAttnOut, p + "attn.proj.weight", {h, qw}, Init::kResidual, Split::kColumns);
        bias(kAttnOut, p + "attn.proj.bias", h);
        if (c.qk_norm) {  // Qwen3: RMSNorm of each q and k head (one weight for every head: replicated)
          add(kAttnOut, p + "attn.q_norm.weight", {d}, Init::kOne);
          add(kAttnOut, p + "attn.k_norm.weight", {d}, Init::kOne);
        }
      }
      if (layer.pieces & kMlpIn) {
        norm(kMlpIn, p + "ln2");
        if (llama) {
          add(kMlpIn, p + "mlp.gate.weight", {f, h}, Init::kNormal, Split::kRows);
          add(kMlpIn, p + "mlp.up.weight", {f, h}, Init::kNormal, Split::kRows);
        } else {
          add(kMlpIn, p + "mlp.fc1.weight", {f, h}, Init::kNormal, Split::kRows);
          bias(kMlpIn, p + "mlp.fc1.bias", f, Split::kRows);
        }
      }
      if (layer.pieces & kMlpOut) {
        add(kMlpOut, p + (llama ? "mlp.down.weight" : "mlp.fc2.weight"), {h, f}, Init::kResidual, Split::kColumns);
        bias(kMlpOut, p + "mlp.fc2.bias", h);
      }
      break;
    }
  }
  return out;
}

// Where tp rank `rank` of `size` finds its part of a parameter.
Shard shard_for(const ParamSpec& spec, const model::GptConfig& c, int size, int rank) {
  Shard shard;
  shard.full_shape = spec.shape;
  if (size == 1 || spec.split == Split::kNone) return shard;
  shard.dim = spec.split == Split::kColumns ? 1 : 0;
  const std::int64_t n = spec.shape[shard.dim];
  switch (spec.split) {
    case Split::kRows:
    case Split::kColumns:
      shard.slices.emplace_back(rank * (n / size), n / size);
      break;
    case Split::kQkvRows:  // [q; k; v], each of h rows split by heads
      for (int part = 0; part < 3; ++part) shard.slices.emplace_back(part * c.hidden + rank * (c.hidden / size), c.hidden / size);
      break;
    default: {
      const auto [begin, end] = vocab_rows(n, size, rank);
      shard.slices.emplace_back(begin, end - begin);
      break;
    }
  }
  return shard;
}

}  // namespace

GptLayerImpl::GptLayerImpl(const model::GptConfig& config, const model::Layer& layer,
                           std::shared_ptr<const TensorParallel> tp)
    : config_(config), layer_(layer), tp_(tp && tp->size > 1 ? std::move(tp) : nullptr) {
  HARP_CHECK(config.ffn_hidden > 0) << "GptConfig.ffn_hidden must be resolved (use model::build_gpt)";
  const int size = tp_size(), rank = tp_ ? tp_->rank : 0;
  if (size > 1) {
    const int kv_heads = config.family == "llama" ? config.kv_heads : config.heads;
    HARP_CHECK(config.heads % size == 0 && kv_heads % size == 0 && config.ffn_hidden % size == 0)
        << "tp " << size << " must divide heads, kv_heads and ffn_hidden";
  }
  std::tie(vocab_begin_, vocab_end_) = vocab_rows(config.vocab, size, rank);
  HARP_CHECK_LT(vocab_begin_, vocab_end_) << "tp " << size << " leaves rank " << rank << " no vocabulary rows";
  for (const ParamSpec& spec : param_specs(config, layer)) {
    Shard shard = shard_for(spec, config, size, rank);
    std::vector<std::int64_t> shape = spec.shape;
    if (shard.split()) {
      shape[shard.dim] = 0;
      for (const auto& slice : shard.slices) shape[shard.dim] += slice.second;
    }
    add_param(*this, spec.name, shape);
    shards_.emplace(spec.name, std::move(shard));
  }
}

torch::Tensor GptLayerImpl::tied_weight() const {
  if (!config_.tied_embeddings) return {};
  const auto params = named_parameters(true);
  if (layer_.kind == model::LayerKind::kHead) return params["embed.token.weight"];
  if (layer_.kind == model::LayerKind::kTail) return params["head.lm.weight"];
  return {};
}

torch::Tensor GptLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& targets) {
  const std::int64_t h = config_.hidden;
  const bool llama = config_.family == "llama";
  const auto params = named_parameters(true);
  auto norm = [&](const torch::Tensor& t, const std::string& prefix) {
    if (llama) return rms_norm(t, params[prefix + ".weight"], config_.norm_eps);
    // A bf16 input (a cut tensor under bf16 autocast) is normalised in float32, as the
    // float32 weights are: libtorch 1.13's CPU LayerNorm has no mixed-dtype backward.
    return torch::layer_norm(low_precision(t) ? t.to(torch::kFloat) : t, {h}, params[prefix + ".weight"],
                             params[prefix + ".bias"], config_.norm_eps);
  };

  if (layer_.kind == model::LayerKind::kHead) {
    HARP_CHECK_EQ(x.dim(), 2) << "the head takes token ids [b, s]";
    HARP_CHECK_LE(x.size(1), config_.seq_len);
    torch::Tensor embedded;
    if (!tp_) {
      embedded = torch::embedding(params["embed.token.weight"], x);
    } else {  // this rank's vocabulary rows; the other ids look up zeros, and g sums
      const torch::Tensor outside = (x < vocab_begin_) | (x >= vocab_end_);
      const torch::Tensor rows = (x - vocab_begin_).masked_fill(outside, 0);
      embedded = torch::embedding(params["embed.token.weight"], rows).masked_fill(outside.unsqueeze(-1), 0.0);
      embedded = tp_sum(embedded);
    }
    if (llama) return embedded;  // rotary positions, applied in attention
    return embedded + params["embed.position.weight"].narrow(0, 0, x.size(1));
  }

  if (layer_.kind == model::LayerKind::kTail) {
    HARP_CHECK_EQ(x.size(-1), h);
    auto y = norm(x, llama ? "head.norm" : "head.ln_f");
    if (!tp_) return lm_loss(runtime::linear(y, params["head.lm.weight"]), targets, config_.vocab);
    torch::Tensor logits = runtime::linear(column_input(y), params["head.lm.weight"]);  // [b, s, this rank's rows]
    if (targets.defined()) return vocab_parallel_loss(logits, targets);
    const auto [begin, end] = std::make_pair(vocab_begin_, vocab_end_);
    return tp_sum(torch::constant_pad_nd(logits, {begin, config_.vocab - end}));
  }

  const std::string p = block_prefix(layer_.block);
  auto w = [&](const std::string& name) { return params[p + name]; };
  // Between pieces the residual is kept apart (`res`, after attn_in and mlp_in) and
  // joined to the piece's output only where a cut needs one tensor: at the end of the
  // layer. A layer starting at attn_out or mlp_out splits its input the same way.
  torch::Tensor t = x, res;
  const int first_piece = layer_.pieces & -layer_.pieces;
  if (first_piece == kAttnOut || first_piece == kMlpOut) {
    const std::int64_t width = x.size(-1) - h;
    HARP_CHECK_GT(width, 0) << (first_piece == kAttnOut ? "attn_out" : "mlp_out") << " takes a cut tensor";
    t = x.narrow(-1, 0, width);
    res = x.narrow(-1, width, h);
  }
  for (int piece : kPieces) {
    if (!(layer_.pieces & piece)) continue;
    torch::Tensor normed;  // the pre-norm of the pieces that start a sub-block
    if (piece == kAttnIn || piece == kMlpIn) {
      HARP_CHECK_EQ(t.size(-1), h) << (piece == kAttnIn ? "attn_in" : "mlp_in") << " takes the hidden state";
      normed = norm(t, p + (piece == kAttnIn ? "ln1" : "ln2"));
      res = t;
    }
    t = llama ? llama_piece(piece, t, normed, w) : gpt_piece(piece, t, normed, w);
    if (piece == kAttnOut || piece == kMlpOut) {  // the residual add ends a sub-block
      t = res + t;
      res = torch::Tensor();
    }
  }
  return res.defined() ? torch::cat({t, res}, -1) : t;
}

// Rotary embedding in the Hugging Face layout: the two halves of each head rotate together
// (rotate_half).
torch::Tensor GptLayerImpl::rotary(const torch::Tensor& x, bool tokens_first) const {
  const std::int64_t s = x.size(tokens_first ? 1 : 2), d = x.size(-1);
  const std::string key = std::to_string(s) + "/" + c10::toString(x.scalar_type()) + "/" + x.device().str();
  std::pair<torch::Tensor, torch::Tensor> table;
  {
    std::lock_guard<std::mutex> lock(rotary_mu_);
    auto it = rotary_tables_.find(key);
    if (it == rotary_tables_.end()) {
      const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
      auto angles = torch::outer(torch::arange(s, f64), rotary_inv_freq(config_, d));  // [s, d/2]
      angles = torch::cat({angles, angles}, -1);
      it =
          rotary_tables_.emplace(key, std::make_pair(angles.cos().to(x.options()), angles.sin().to(x.options()))).first;
    }
    table = it->second;
  }
  auto [cos, sin] = table;
  if (tokens_first) {  // [s, 1, d]: the same angle for every head
    cos = cos.unsqueeze(1);
    sin = sin.unsqueeze(1);
  }
  auto rotated = torch::cat({-x.narrow(-1, d / 2, d / 2), x.narrow(-1, 0, d / 2)}, -1);
  return x * cos + rotated * sin;
}

torch::Tensor GptLayerImpl::attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) const {
  return causal_attention_core(q, k, v, recompute_attention_, config_.sliding_window);
}

torch::Tensor GptLayerImpl::gpt_piece(int piece, const torch::Tensor& t, const torch::Tensor& normed,
                                      const Weights& w) const {
  // This rank's share: h / tp of q, k and v (heads / tp heads), ffn / tp activations.
  const std::int64_t h = config_.hidden / tp_size(), f = config_.ffn_hidden / tp_size(), a = config_.heads / tp_size();
  switch (piece) {
    case kAttnIn:  // q, k, v (forward() keeps the residual beside them)
      return runtime::linear(column_input(normed), w("attn.qkv.weight"), w("attn.qkv.bias"));
    case kAttnOut: {  // the projected attention (forward() adds the residual)
      HARP_CHECK_EQ(t.size(-1), 3 * h) << "attn_out takes [q, k, v] and the residual";
      const std::int64_t b = t.size(0), s = t.size(1), d = h / a;
      if (fused_kernels_apply(t))  // q, k, v read where they lie (kernels.h)
        return row_linear(causal_attention_packed(t, static_cast<int>(a), static_cast<int>(a), recompute_attention_),
                          w("attn.proj.weight"), w("attn.proj.bias"));
      auto heads = [&](int i) {  // [b, a, s, d]
        return t.narrow(-1, i * h, h).reshape({b, s, a, d}).transpose(1, 2);
      };
      auto context = attention(heads(0), heads(1), heads(2)).transpose(1, 2).reshape({b, s, h});
      return row_linear(context, w("attn.proj.weight"), w("attn.proj.bias"));
    }
    case kMlpIn: {
      const torch::Tensor y = runtime::linear(column_input(normed), w("mlp.fc1.weight"), w("mlp.fc1.bias"));
      return fused_kernels_apply(y) ? gelu_tanh(y) : torch::gelu(y, "tanh");
    }
    default:
      HARP_CHECK_EQ(t.size(-1), f) << "mlp_out takes gelu(fc1) and the residual";
      return row_linear(t, w("mlp.fc2.weight"), w("mlp.fc2.bias"));
  }
}

torch::Tensor GptLayerImpl::llama_piece(int piece, const torch::Tensor& t, const torch::Tensor& normed,
                                        const Weights& w) const {
  // This rank's share (see gpt_piece): heads / tp query and kv_heads / tp key/value heads
  // of the head size d (hidden / heads unless head_dim says: Qwen3).
  const int n = tp_size();
  const std::int64_t d = config_.head_size();
  const std::int64_t f = config_.ffn_hidden / n, a = config_.heads / n;
  const std::int64_t g = config_.kv_heads / n, qw = a * d, kv = g * d;
  // q, k and v's biases (Qwen2), or none.
  auto bias = [&](const char* name) {
    return config_.qkv_bias ? w(std::string("attn.") + name + ".bias") : torch::Tensor();
  };
  // Qwen3's RMSNorm of each q and k head (on the head size, before rotary), or nothing.
  // Its weight is replicated under tensor parallelism while each rank normalises only its
  // own heads: f on the weight sums its gradient over the group.
  auto head_norm = [&](const torch::Tensor& x, const char* name) {
    return config_.qk_norm ? rms_norm(x, column_input(w(std::string("attn.") + name + ".weight")), config_.norm_eps)
                           : x;
  };
  switch (piece) {
    case kAttnIn: {  // q, k, v (rotary not yet applied; forward() keeps the residual beside them)
      const torch::Tensor x = column_input(normed);
      return torch::cat(
          {runtime::linear(x, w("attn.q.weight"), bias("q")), runtime::linear(x, w("attn.k.weight"), bias("k")),
           runtime::linear(x, w("attn.v.weight"), bias("v"))},
          -1);
    }
    case kAttnOut: {  // the projected attention (forward() adds the residual)
      HARP_CHECK_EQ(t.size(-1), qw + 2 * kv) << "attn_out takes [q, k, v] and the residual";
      const std::int64_t b = t.size(0), s = t.size(1);
      const bool windowed = config_.sliding_window > 0 && config_.sliding_window < s;
      if (fused_kernels_apply(t) && !windowed) {  // [b, s, n, d] views; kv heads shared without copies (kernels.h)
        auto heads = [&](std::int64_t offset, std::int64_t n) { return t.narrow(-1, offset, n * d).view({b, s, n, d}); };
        auto q = rotary(head_norm(heads(0, a), "q_norm"), true), k = rotary(head_norm(heads(qw, g), "k_norm"), true);
        return row_linear(causal_attention(q, k, heads(qw + kv, g), recompute_attention_), w("attn.proj.weight"),
                          torch::Tensor());
      }
      auto heads = [&](std::int64_t offset, std::int64_t n) {  // [b, n, s, d]
        return t.narrow(-1, offset, n * d).reshape({b, s, n, d}).transpose(1, 2);
      };
      auto q = rotary(head_norm(heads(0, a), "q_norm"), false);
      auto k = rotary(head_norm(heads(qw, g), "k_norm"), false);
      auto context = attention(q, k, heads(qw + kv, g)).transpose(1, 2).reshape({b, s, qw});  // g < a: GQA
      return row_linear(context, w("attn.proj.weight"), torch::Tensor());
    }
    case kMlpIn: {
      const torch::Tensor x = column_input(normed);
      return torch::silu(runtime::linear(x, w("mlp.gate.weight"))) * runtime::linear(x, w("mlp.up.weight"));
    }
    default:
      HARP_CHECK_EQ(t.size(-1), f) << "mlp_out takes silu(gate) * up and the residual";
      return row_linear(t, w("mlp.down.weight"), torch::Tensor());
  }
}

namespace {

// GPT-2 initialisation (LLaMA's pieces alike: normal 0.02, the residual projections
// scaled, norms at 1; param_specs), drawn in float64 on the CPU so float32 and float64 models and
// CPU and CUDA ranks start from the same values (up to rounding).
void init_layer(GptLayerImpl& layer, const model::GptConfig& c, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto params = layer.named_parameters(true);
  // Residual projections scaled by 1/sqrt(2R) (GPT-2), keeping the residual stream's
  // variance independent of depth.
  const double residual_std = kInitStd / std::sqrt(2.0 * c.num_blocks);
  const model::Layer& l = layer.layer();
  std::map<int, at::Generator> generators;  // one per stream, created at its first draw
  for (const ParamSpec& spec : param_specs(c, l)) {
    if (spec.init == Init::kOne) params[spec.name].fill_(1.0);
    if (spec.init != Init::kNormal && spec.init != Init::kResidual) continue;
    // Drawn in full and sharded (a tp rank keeps its part), so every tp degree starts
    // from the same weights.
    const Shard& shard = layer.shards().at(spec.name);
    torch::Tensor full = shard.split() ? torch::zeros(spec.shape, torch::kFloat64) : params[spec.name];
    auto it = generators.find(spec.stream);
    if (it == generators.end()) {
      // Tied: the tail replays the head's generator, whose first draw is the token embedding.
      const int stream = spec.stream == kTailStream && c.tied_embeddings ? kEmbedStream : spec.stream;
      const int block = l.kind == model::LayerKind::kBlockPart ? l.block : -1;
      it = generators.emplace(spec.stream, init_generator(seed, block, stream)).first;
    }
    full.normal_(0.0, spec.init == Init::kResidual ? residual_std : kInitStd, it->second);
    if (shard.split()) params[spec.name].copy_(shard.take(full));
  }
}

}  // namespace

std::vector<GptLayer> build_gpt_layers(const model::ModelSpec& model, int first, int last,
                                       std::uint64_t seed, torch::Dtype dtype,
                                       const torch::Device& device,
                                       std::shared_ptr<const TensorParallel> tp) {
  HARP_CHECK(0 <= first && first <= last && last <= model.num_layers())
      << "layer range [" << first << ", " << last << ") of " << model.num_layers();
  HARP_CHECK(dtype == torch::kFloat32 || dtype == torch::kFloat64) << "dtype " << dtype;
  std::vector<GptLayer> layers;
  for (int i = first; i < last; ++i) {
    GptLayer layer(model.gpt, model.layers[i], tp);
    init_layer(*layer, model.gpt, seed);
    layer->to(device, dtype);
    layers.push_back(std::move(layer));
  }
  return layers;
}

std::vector<std::pair<std::string, torch::Tensor>> named_parameters(
    const std::vector<GptLayer>& layers) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& layer : layers) {
    for (const auto& item : layer->named_parameters(true))
      out.emplace_back(item.key(), item.value());
  }
  return out;
}

}  // namespace harp::runtime
