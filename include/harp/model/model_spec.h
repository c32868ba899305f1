// Model specs and the fine-grained layer sequence the planner cuts into stages.
//
// A model with R blocks and granularity k becomes L = 2 + R·k layers: the head (token
// embedding, plus GPT's position embedding), k sub-layers per block, the tail (final
// norm, LM head, loss). Every quantity is per sample (one sequence); multiply by the
// microbatch size. Tensors are fp16/bf16 (2 bytes) as in mixed-precision training.
//
// Two families share the layer sequence and the four block pieces (attention in and out,
// MLP in and out): gpt (LayerNorm, learned positions, GELU MLP of ffn_hidden, biases,
// tied embeddings by default) and llama (RMSNorm, rotary positions, SwiGLU MLP of
// ffn_hidden = the intermediate size, grouped-query attention with kv_heads, no biases,
// untied embeddings). The LLaMA lineage's other families are llama with parts set
// (GptConfig: Qwen2/2.5's q, k, v biases; Qwen3's q/k norm and explicit head_dim;
// Mistral's sliding window; LLaMA 3.1's rope scaling), read from Hugging Face's
// config.json by model/hf_config.h. The runtime trains both (runtime/gpt.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/common/units.h"

namespace harp::model {

// LLaMA 3.1's scaling of the rotary frequencies (Hugging Face's rope_type "llama3"):
// wavelengths beyond original_max_position_embeddings / low_freq_factor are stretched by
// `factor`, those below ... / high_freq_factor kept, the ones between interpolated.
struct RopeScaling {
  std::string type;  // "" (none) or "llama3"
  double factor = 0, low_freq_factor = 0, high_freq_factor = 0;
  int original_max_position_embeddings = 0;
  bool operator==(const RopeScaling& o) const {
    return type == o.type && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor &&
           original_max_position_embeddings == o.original_max_position_embeddings;
  }
};

struct GptConfig {
  std::string family = "gpt";  // gpt | llama
  std::string name;      // preset name or "custom"
  int num_blocks = 0;    // R
  int hidden = 0;        // h
  int heads = 0;         // a
  int seq_len = 1024;    // s
  int vocab = 51200;     // V
  int ffn_hidden = 0;    // 4h unless given
  int granularity = 1;   // k sub-layers per block, 1..4
  bool tied_embeddings = true;  // LM head shares the token embedding (GPT-2/3)
  int kv_heads = 0;             // llama: key/value heads (grouped-query attention); = heads
  double rope_theta = 10000;    // llama: rotary base
  // The norms' epsilon (GPT's LayerNorm, LLaMA's RMSNorm): 1e-5, LLaMA-2's, LLaMA-3's and
  // GPT-2's; Qwen's and Mistral's configs give 1e-6.
  double norm_eps = 1e-5;
  // llama parts (the LLaMA lineage; all off for LLaMA itself):
  int head_dim = 0;          // per-head size; 0: hidden / heads (Qwen3 gives 128 at any size)
  bool qkv_bias = false;     // biases on the q, k and v projections (Qwen2/2.5)
  bool qk_norm = false;      // RMSNorm of each q and k head before rotary, weights of head_dim (Qwen3)
  int sliding_window = 0;    // a query sees the last W positions, its own included (Mistral); 0: all
  RopeScaling rope_scaling;  // LLaMA 3.1
  // The Hugging Face class the config names (LlamaForCausalLM, Qwen2ForCausalLM, ...):
  // what an export writes back; "" for harp's own models (GPT2LMHeadModel or
  // LlamaForCausalLM by family).
  std::string architecture;

  // hidden / heads unless head_dim says otherwise.
  int head_size() const { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
};

enum class LayerKind { kHead, kBlockPart, kTail };

struct Layer {
  std::string name;       // "embed", "block3.attn", "block3.mlp", "head"
  LayerKind kind = LayerKind::kBlockPart;
  int block = -1;         // block index for block parts, -1 otherwise
  int part = 0;           // sub-layer index j inside the block (0..k-1)
  // Identical for every block's j-th sub-layer (DESIGN: layer signature); differs
  // whenever the structure or shapes differ.
  std::string signature;
  // Which of the four block pieces this layer holds (bits: 1 attn_in, 2 attn_out,
  // 4 mlp_in, 8 mlp_out); 0 for head and tail. The runtime builds the layer from it.
  int pieces = 0;
  Flops fwd_flops = 0;               // forward FLOPs per sample (backward = 2x)
  std::int64_t param_count = 0;      // parameters owned by this layer
  Bytes param_bytes = 0;             // param_count x 2 (fp16)
  Bytes activation_bytes = 0;        // kept for backward per sample per in-flight microbatch
  Bytes output_bytes = 0;            // crosses a cut placed after this layer, per sample
  // Shape of that tensor per sample ({seq_len, width}; {} for the tail's scalar loss),
  // fp16/bf16 elements: output_bytes = 2 x the product for every layer but the tail.
  std::vector<std::int64_t> output_shape;
  Bytes mem_traffic_bytes = 0;       // forward memory traffic per sample (roofline)
  // Recomputation (common/recompute.h). The tensor entering the layer, per sample (what
  // full recomputation keeps where a block's run of layers starts in a stage); of
  // activation_bytes, the attention core's scores and probabilities per sample (what
  // selective recomputation frees); and the core's forward FLOPs per sample (what it
  // repeats in the backward). The last two are 0 for layers without attention.
  Bytes input_bytes = 0;
  Bytes attention_score_bytes = 0;
  Flops attention_flops = 0;
  // What a split backward keeps from its I to its W per sample (schedule/zero_bubble.h):
  // the linear layers' inputs and output gradients, 2-byte elements as activation_bytes.
  Bytes weight_grad_bytes = 0;
  // Memory as the runtime spends it (docs/cost_model.md, "Memory"), per sample, 2-byte
  // elements as activation_bytes: of activation_bytes, what every tensor-parallel rank
  // keeps whole (the h-wide norm inputs and the inputs of the projections that follow
  // them; Megatron without sequence parallelism); the largest temporary its backward
  // allocates beyond what it keeps (the gradient of its widest intermediate: the MLP's
  // hidden, the attention probabilities, the logits); and the fp16 bytes of its largest
  // parameter tensor, whose gradient autograd computes apart and then adds into .grad.
  Bytes replicated_activation_bytes = 0;
  Bytes backward_working_bytes = 0;
  Bytes largest_weight_bytes = 0;
};

struct ModelSpec {
  std::string family = "gpt";
  GptConfig gpt;
  std::vector<Layer> layers;

  int num_layers() const { return static_cast<int>(layers.size()); }
  std::int64_t param_count() const;
  Flops fwd_flops_per_sample() const;
  std::string fingerprint() const;
};

// Preset names in size order: gpt-125m ... gpt-76b (plus gpt-tiny for tests and CPU),
// then llama-tiny, llama-2-7b, -13b, -70b, llama-3-8b, -70b.
std::vector<std::string> gpt_preset_names();
// LLaMA's default intermediate size for `hidden`: Meta's rule with multiplier 1,
// 8h/3 rounded up to a multiple of 256 (11008 for 4096).
int llama_ffn_hidden(int hidden);

// The largest tensor-parallel degree, a power of two, that splits `c` as the runtime does:
// it divides the heads, the key/value heads and the ffn width, and leaves every rank
// vocabulary rows (ceil(V / tp) each). The planner searches no higher.
int max_tensor_parallel(const GptConfig& c);

// Returns the preset's config; NotFound with the list of presets otherwise.
StatusOr<GptConfig> gpt_preset(const std::string& name);

// Validates `config` and builds the layer sequence. Messages use `file`/`path`.
StatusOr<ModelSpec> build_gpt(const GptConfig& config, const std::string& file = "",
                              const std::string& path = "model");

// Parses a model section: {family: gpt, preset: gpt-1.3b, granularity: 2}, explicit
// {family: gpt, num_blocks, hidden, heads, seq_len, vocab, ffn_hidden, granularity}
// (llama adds kv_heads and rope_theta, ffn_hidden defaulting to Meta's rule: 8h/3 rounded
// up to a multiple of 256, and the parts: head_dim, qkv_bias, qk_norm, sliding_window,
// rope_scaling; every family norm_eps), or a Hugging Face config: {hf_config: PATH,
// seq_len, granularity, name}, PATH a config.json or the folder holding one, relative to
// `file`'s folder (model/hf_config.h; seq_len defaults to max_position_embeddings).
StatusOr<ModelSpec> parse_model(const Json& node, const std::string& file,
                                const std::string& path = "model");
// A preset name alone ("gpt-1.3b"), a model file path, or a Hugging Face config.json (or
// the folder holding one).
StatusOr<ModelSpec> load_model(const std::string& preset_or_file, int granularity_override = 0);

Json model_to_json(const ModelSpec& model);

}  // namespace harp::model
