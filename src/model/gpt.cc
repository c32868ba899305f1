// GPT and LLaMA presets and their layer sequence. FLOPs count matrix multiplies only
// (GPT: the usual 24·h²·s + 4·s²·h per block and sample, forward); GPT's activation bytes
// follow Korthikanti et al. (34·s·h + 5·a·s² per block and sample, fp16, no
// recomputation), LLaMA's count the same way what its pieces keep for the backward (no
// dropout masks; SwiGLU keeps its gate, up and SiLU outputs) with memory-efficient
// attention (FlashAttention / SDPA, as LLaMA training stacks run it: no s x s scores).
#include <algorithm>
#include <cmath>

#include "harp/common/fields.h"
#include "harp/common/format.h"
#include "harp/common/hash.h"
#include "harp/model/model_spec.h"

#include <tuple>

namespace harp::model {
namespace {

struct Preset {
  const char* name;
  int blocks, hidden, heads, seq, vocab;
  // LLaMA only (family llama when kv_heads > 0): key/value heads, intermediate size,
  // rotary base; GPT's ffn is 4h.
  int kv_heads = 0, ffn = 0;
  double rope_theta = 10000;
};

// The GPT-3 table used by Alpa and HARP (seq 1024, vocab 51200, ffn 4h), a tiny model
// that trains in seconds on a CPU, and LLaMA (harp-formats notes §3; the parameter
// counts match the published sizes exactly).
constexpr Preset kPresets[] = {
    {"gpt-tiny", 2, 64, 4, 32, 256},       {"gpt-125m", 12, 768, 12, 1024, 51200},
    {"gpt-350m", 24, 1024, 16, 1024, 51200}, {"gpt-760m", 24, 1536, 16, 1024, 51200},
    {"gpt-1.3b", 24, 2048, 32, 1024, 51200}, {"gpt-2.6b", 32, 2560, 32, 1024, 51200},
    {"gpt-6.7b", 32, 4096, 32, 1024, 51200}, {"gpt-15b", 48, 5120, 40, 1024, 51200},
    {"gpt-39b", 48, 8192, 64, 1024, 51200},  {"gpt-76b", 60, 10240, 80, 1024, 51200},
    {"llama-tiny", 2, 64, 4, 32, 256, 2, 192},
    {"llama-2-7b", 32, 4096, 32, 4096, 32000, 32, 11008},
    {"llama-2-13b", 40, 5120, 40, 4096, 32000, 40, 13824},
    {"llama-2-70b", 80, 8192, 64, 4096, 32000, 8, 28672},
    {"llama-3-8b", 32, 4096, 32, 8192, 128256, 8, 14336, 5e5},
    {"llama-3-70b", 80, 8192, 64, 8192, 128256, 8, 28672, 5e5},
};

enum Piece { kAttnIn = 1, kAttnOut = 2, kMlpIn = 4, kMlpOut = 8 };

// Pieces of each sub-layer for granularity k, and their names.
struct Part {
  int pieces;
  const char* name;
};
std::vector<Part> parts_for(int k) {
  switch (k) {
    case 1: return {{kAttnIn | kAttnOut | kMlpIn | kMlpOut, "block"}};
    case 2: return {{kAttnIn | kAttnOut, "attn"}, {kMlpIn | kMlpOut, "mlp"}};
    case 3: return {{kAttnIn | kAttnOut, "attn"}, {kMlpIn, "mlp_in"}, {kMlpOut, "mlp_out"}};
    default:
      return {{kAttnIn, "attn_in"}, {kAttnOut, "attn_out"}, {kMlpIn, "mlp_in"}, {kMlpOut, "mlp_out"}};
  }
}

// Per-token figures of one piece (output is what crosses a cut after it, per token).
// Per token: forward FLOPs, parameters, activation bytes kept, output bytes, and the
// bytes a split backward's W keeps (the linear layers' inputs and output gradients); of
// the activation bytes, those every tp rank keeps whole (rep); the backward's largest
// temporary (bwd_work, model::Layer::backward_working_bytes); and the parameters of the
// piece's largest weight (not per token).
struct PieceCost {
  double flops, params, act_bytes, out_bytes, wgrad_bytes;
  double rep_bytes = 0, bwd_work = 0, big_weight = 0;
};
// The keys a query attends to, counted as in GPT's 4·s²·h (every key, the causal mask
// aside): s, or the sliding window where it is shorter.
double keys_per_query(const GptConfig& c) {
  return c.sliding_window > 0 ? std::min(c.seq_len, c.sliding_window) : c.seq_len;
}

PieceCost llama_piece_cost(int piece, const GptConfig& c) {
  const double h = c.hidden, a = c.heads, f = c.ffn_hidden, d = c.head_size();
  const double q = a * d, kv = c.kv_heads * d;  // widths of q and of k (and of v)
  const double qkv_bias = c.qkv_bias ? q + 2 * kv : 0;
  // Qwen3's q/k norm (in attn_out, before rotary): its weights, and its float32 inputs kept.
  const double norm_params = c.qk_norm ? 2 * d : 0, norm_act = c.qk_norm ? 4 * (q + kv) : 0;
  switch (piece) {
    case kAttnIn:  // RMSNorm 1 + q, k, v projections (biases: Qwen2); the residual travels with them
      return {2 * h * (q + 2 * kv),
              h + h * (q + 2 * kv) + qkv_bias,
              4 * h,
              2 * (q + 2 * kv + h),
              2 * (h + q + 2 * kv),
              4 * h,
              2 * (q + 2 * kv),
              h * (q + 2 * kv)};
    case kAttnOut:  // q/k norm, rotary, attention (memory-efficient: q, k, v and the fp32
                    // log-sum-exp are kept, no s x s scores), output projection, residual add
      return {4 * keys_per_query(c) * q + 2 * q * h,
              q * h + norm_params,
              2 * (q + 2 * kv) + 2 * q + 4 * a + norm_act,
              2 * h,
              2 * (q + h),
              0,
              2 * (q + 2 * kv),
              q * h};
    case kMlpIn:  // RMSNorm 2 + gate and up projections + SiLU(gate) x up
      return {4 * h * f, h + 2 * h * f, 4 * h + 6 * f, 2 * (f + h), 2 * (h + 2 * f), 4 * h, 4 * f, h * f};
    default:  // down projection + residual add
      return {2 * f * h, f * h, 2 * f, 2 * h, 2 * (f + h), 0, 2 * f, f * h};
  }
}

PieceCost piece_cost(int piece, const GptConfig& c) {
  if (c.family == "llama") return llama_piece_cost(piece, c);
  const double h = c.hidden, a = c.heads, s = c.seq_len, f = c.ffn_hidden;
  switch (piece) {
    case kAttnIn:  // LayerNorm 1 + QKV projection; the residual travels with q, k, v
      return {6 * h * h, 2 * h + 3 * h * h + 3 * h, 4 * h, 2 * (3 * h + h), 2 * (h + 3 * h), 4 * h, 2 * 3 * h,
              3 * h * h};
    case kAttnOut:  // scores, softmax, weighted sum, output projection, residual add: q, k,
                    // v, the probabilities and the projection's input (no dropout)
      return {4 * s * h + 2 * h * h, h * h + h, 8 * h + 2 * a * s, 2 * h, 2 * (2 * h), 0, 2 * 2 * a * s, h * h};
    case kMlpIn:  // LayerNorm 2 + FC1 + GELU; the residual travels with the hidden state
      return {2 * h * f, 2 * h + h * f + f, 4 * h + 2 * f, 2 * (f + h), 2 * (h + f), 4 * h, 2 * f, h * f};
    default:  // FC2 + residual add: FC2's input (no dropout mask)
      return {2 * f * h, f * h + h, 2 * f, 2 * h, 2 * (f + h), 0, 2 * f, f * h};
  }
}

Layer make_layer(const std::string& name, LayerKind kind, const std::string& structure) {
  Layer l;
  l.name = name;
  l.kind = kind;
  l.signature = hex_fingerprint(structure);
  return l;
}

std::string shape_key(const GptConfig& c) {
  return "h" + std::to_string(c.hidden) + "/a" + std::to_string(c.heads) + "/s" + std::to_string(c.seq_len) + "/f" +
         std::to_string(c.ffn_hidden) + "/v" + std::to_string(c.vocab) +
         (c.family == "llama" ? "/kv" + std::to_string(c.kv_heads) : std::string()) +
         // The parts that change a layer's work (not its eps or rotary frequencies).
         (c.head_dim > 0 ? "/d" + std::to_string(c.head_dim) : std::string()) + (c.qkv_bias ? "/qkvb" : "") +
         (c.qk_norm ? "/qkn" : "") + (c.sliding_window > 0 ? "/w" + std::to_string(c.sliding_window) : std::string());
}

}  // namespace

int llama_ffn_hidden(int hidden) {
  const int f = 8 * hidden / 3;
  return (f + 255) / 256 * 256;
}

int max_tensor_parallel(const GptConfig& c) {
  const int kv = c.family == "llama" && c.kv_heads > 0 ? c.kv_heads : c.heads;
  auto splits = [&](int tp) {
    const long long per = (static_cast<long long>(c.vocab) + tp - 1) / tp;
    return c.heads % tp == 0 && kv % tp == 0 && c.ffn_hidden % tp == 0 && per * (tp - 1) < c.vocab;
  };
  int tp = 1;
  while (tp < (1 << 12) && splits(2 * tp)) tp *= 2;
  return tp;
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.push_back(p.name);
  return out;
}

StatusOr<GptConfig> gpt_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    GptConfig c;
    c.name = p.name;
    c.num_blocks = p.blocks;
    c.hidden = p.hidden;
    c.heads = p.heads;
    c.seq_len = p.seq;
    c.vocab = p.vocab;
    c.ffn_hidden = p.kv_heads > 0 ? p.ffn : 4 * p.hidden;
    if (p.kv_heads > 0) {
      c.family = "llama";
      c.kv_heads = p.kv_heads;
      c.tied_embeddings = false;
      c.rope_theta = p.rope_theta;
    }
    return c;
  }
  std::string list;
  for (const auto& n : gpt_preset_names()) list += (list.empty() ? "" : ", ") + n;
  return not_found("unknown model preset `" + name + "`; use one of: " + list);
}

StatusOr<ModelSpec> build_gpt(const GptConfig& cin, const std::string& file,
                              const std::string& path) {
  GptConfig c = cin;
  const bool llama = c.family == "llama";
  if (c.ffn_hidden == 0) c.ffn_hidden = llama ? llama_ffn_hidden(c.hidden) : 4 * c.hidden;
  if (llama && c.kv_heads == 0) c.kv_heads = c.heads;
  auto bad = [&](const std::string& key, long long v, const std::string& rule,
                 const std::string& fix) {
    return field_error(file, join_path(path, key), std::to_string(v), rule, fix);
  };
  if (c.num_blocks < 1) return bad("num_blocks", c.num_blocks, "must be at least 1", "use 1 or more blocks");
  if (c.hidden < 1) return bad("hidden", c.hidden, "must be at least 1", "use a positive hidden size");
  if (c.heads < 1) return bad("heads", c.heads, "must be at least 1", "use a positive head count");
  // The LLaMA lineage's parts belong to the llama family.
  if (!llama && (c.head_dim > 0 || c.qkv_bias || c.qk_norm || c.sliding_window > 0 || !c.rope_scaling.type.empty()))
    return field_error(file, join_path(path, "family"), c.family,
                       "has no head_dim, qkv_bias, qk_norm, sliding_window or rope_scaling (the LLaMA lineage's parts)",
                       "use family llama, or drop those fields");
  if (c.head_dim < 0 || c.head_dim > (1 << 12))
    return bad("head_dim", c.head_dim, "must be between 1 and 4096", "use the model's head size");
  if (c.head_dim == 0 && c.hidden % c.heads != 0)
    return bad("heads", c.heads, "must divide hidden (" + std::to_string(c.hidden) + ")",
               "choose heads so that hidden / heads is a whole number, or give head_dim");
  // Rotary embeddings turn pairs of a head's dimensions: the head size must be even.
  if (llama && c.head_size() % 2 != 0)
    return bad(c.head_dim > 0 ? "head_dim" : "heads", c.head_dim > 0 ? c.head_dim : c.heads,
               "makes the head size " + std::to_string(c.head_size()) + ", which rotary embeddings (LLaMA) need even",
               "choose an even head size (LLaMA models use 64 or 128)");
  if (c.sliding_window < 0 || c.sliding_window > (1 << 20))
    return bad("sliding_window", c.sliding_window, "must be between 0 (none) and 2^20", "use the model's window");
  if (!(c.norm_eps > 0 && c.norm_eps < 1))
    return field_error(file, join_path(path, "norm_eps"), fmt("%g", c.norm_eps), "must be in (0, 1)",
                       "use the model's epsilon (1e-5 LLaMA and GPT-2, 1e-6 Qwen and Mistral)");
  if (const RopeScaling& r = c.rope_scaling; !r.type.empty()) {
    if (r.type != "llama3" || !(r.factor > 0) || !(r.low_freq_factor > 0) ||
        !(r.high_freq_factor > r.low_freq_factor) || r.original_max_position_embeddings < 1)
      return field_error(file, join_path(path, "rope_scaling"), r.type,
                         "must be llama3 with a positive factor, 0 < low_freq_factor < high_freq_factor and a "
                         "positive original_max_position_embeddings",
                         "use LLaMA 3.1's values (factor 8, 1, 4, 8192)");
  }
  if (c.seq_len < 1) return bad("seq_len", c.seq_len, "must be at least 1", "use a positive sequence length");
  if (c.vocab < 2) return bad("vocab", c.vocab, "must be at least 2", "use the tokenizer's vocabulary size");
  // Upper bounds far beyond published models (GPT-3 175B: 96 blocks, hidden 12288), so
  // that every FLOP, byte and parameter count stays exact in its type and the layer
  // sequence stays small (docs/file_formats.md, Limits).
  for (const auto& [key, v, most] : {std::tuple<const char*, long long, long long>{"num_blocks", c.num_blocks, 1024},
                                     {"hidden", c.hidden, 1 << 17},
                                     {"heads", c.heads, 1 << 12},
                                     {"seq_len", c.seq_len, 1 << 20},
                                     {"vocab", c.vocab, 1 << 22},
                                     {"ffn_hidden", c.ffn_hidden, 1 << 20}})
    if (v > most)
      return bad(key, v, "must be at most " + std::to_string(most), "describe a model within these bounds");
  if (llama && (c.kv_heads < 1 || c.kv_heads > c.heads || c.heads % c.kv_heads != 0))
    return bad("kv_heads", c.kv_heads, "must divide heads (" + std::to_string(c.heads) + ")",
               "use a kv_heads that divides heads (heads itself: no grouping)");
  if (llama && !(c.rope_theta > 0 && c.rope_theta < 1e12))
    return field_error(file, join_path(path, "rope_theta"), std::to_string(c.rope_theta),
                       "must be positive and below 1e12", "use the checkpoint's rope_theta (1e4 LLaMA-2, 5e5 LLaMA-3)");
  if (c.granularity < 1 || c.granularity > 4)
    return bad("granularity", c.granularity, "must be 1, 2, 3 or 4 sub-layers per block",
               "use granularity 1 (whole blocks) to 4 (finest)");

  ModelSpec m;
  m.family = c.family;
  m.gpt = c;
  const double h = c.hidden, s = c.seq_len, V = c.vocab;
  const std::string shapes = shape_key(c);
  const std::string fam = c.family + "/";

  Layer head = make_layer("embed", LayerKind::kHead, fam + "embed/" + shapes);
  head.fwd_flops = 0;  // a lookup (and GPT's position add): no matrix multiply
  head.param_count = static_cast<std::int64_t>(V * h + (llama ? 0 : s * h));  // llama: rotary, no table
  head.activation_bytes = llama ? 0 : s * h;  // GPT's dropout mask
  head.output_bytes = 2 * s * h;
  head.output_shape = {c.seq_len, c.hidden};
  head.mem_traffic_bytes = 2 * 2 * s * h;
  head.replicated_activation_bytes = head.activation_bytes;
  head.largest_weight_bytes = 2 * V * h;  // the embedding's gradient is dense
  m.layers.push_back(head);

  const auto parts = parts_for(c.granularity);
  for (int b = 0; b < c.num_blocks; ++b) {
    for (size_t j = 0; j < parts.size(); ++j) {
      const Part& part = parts[j];
      Layer l = make_layer("block" + std::to_string(b) + "." + part.name, LayerKind::kBlockPart,
                           fam + "block/" + std::to_string(part.pieces) + "/" + shapes);
      l.block = b;
      l.part = static_cast<int>(j);
      l.pieces = part.pieces;
      double in_bytes = 0;
      bool first = true;
      for (int piece : {kAttnIn, kAttnOut, kMlpIn, kMlpOut}) {
        if (!(part.pieces & piece)) continue;
        PieceCost pc = piece_cost(piece, c);
        if (first) in_bytes = (piece == kMlpOut) ? 2 * (c.ffn_hidden + h)
                                : (piece == kAttnOut) ? piece_cost(kAttnIn, c).out_bytes : 2 * h;
        first = false;
        l.fwd_flops += pc.flops * s;
        if (piece == kAttnOut) {
          // q kᵀ and the weighted sum of v: 4·s·h per token (the width of q and the keys a
          // query sees for the LLaMA lineage)
          l.attention_flops = llama ? 4 * keys_per_query(c) * c.heads * c.head_size() * s : 4 * s * h * s;
          // GPT: the softmax's probabilities (2·a·s per token: Korthikanti's 5·a·s less
          // dropout's mask and output; HARP trains without dropout); LLaMA's
          // memory-efficient core keeps only its output and log-sum-exp.
          l.attention_score_bytes = (llama ? 2.0 * c.heads * c.head_size() + 4 * c.heads : 2 * c.heads * s) * s;
        }
        l.param_count += static_cast<std::int64_t>(pc.params);
        l.activation_bytes += pc.act_bytes * s;
        l.weight_grad_bytes += pc.wgrad_bytes * s;
        l.replicated_activation_bytes += pc.rep_bytes * s;
        l.backward_working_bytes = std::max(l.backward_working_bytes, pc.bwd_work * s);
        l.largest_weight_bytes = std::max(l.largest_weight_bytes, 2 * pc.big_weight);
        l.output_bytes = pc.out_bytes * s;
        l.output_shape = {c.seq_len, static_cast<std::int64_t>(pc.out_bytes / 2)};
      }
      l.mem_traffic_bytes = in_bytes * s + l.output_bytes;
      l.input_bytes = in_bytes * s;
      m.layers.push_back(l);
    }
  }

  Layer tail = make_layer("head", LayerKind::kTail,
                          fam + "head/" + shapes + (c.tied_embeddings ? "/tied" : "/untied"));
  tail.fwd_flops = 2 * h * V * s;
  // The final norm (LayerNorm: weight and bias; RMSNorm: weight) and the LM head.
  tail.param_count = static_cast<std::int64_t>((llama ? h : 2 * h) + (c.tied_embeddings ? 0 : V * h));
  tail.activation_bytes = (4 * h + 4 * V) * s;  // LN and head inputs, fp32 logits for the loss
  tail.output_bytes = 4;                          // the loss
  tail.input_bytes = 2 * s * h;
  tail.weight_grad_bytes = 2 * (h + V) * s;  // the LM head's input and the logits' gradient
  tail.mem_traffic_bytes = 2 * s * h + 4 * V * s;
  tail.replicated_activation_bytes = 4 * h * s;  // the norm's and the LM head's inputs
  tail.backward_working_bytes = 4 * V * s;       // the float32 logits' gradient
  tail.largest_weight_bytes = 2 * V * h;         // the LM head (a tied copy's gradient too)
  m.layers.push_back(tail);

  for (auto& l : m.layers) l.param_bytes = 2.0 * static_cast<double>(l.param_count);
  return m;
}

std::int64_t ModelSpec::param_count() const {
  std::int64_t n = 0;
  for (const auto& l : layers) n += l.param_count;
  return n;
}

Flops ModelSpec::fwd_flops_per_sample() const {
  Flops f = 0;
  for (const auto& l : layers) f += l.fwd_flops;
  return f;
}

std::string ModelSpec::fingerprint() const { return hex_fingerprint(model_to_json(*this).dump()); }

}  // namespace harp::model
