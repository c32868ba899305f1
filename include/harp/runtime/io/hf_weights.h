// Hugging Face weights in and out (safetensors, harp/data/safetensors.h): the runtime's
// global parameter names mapped to GPT2LMHeadModel's or LlamaForCausalLM's.
//
// GPT-2: its Conv1D weights are stored transposed ([in, out]), the position table is cut
// to the model's seq_len, and the LM head is tied to wte (GPT-2 files carry no
// lm_head.weight; an untied model's is read).
//
//   ours                         Hugging Face GPT-2
//   embed.token.weight           transformer.wte.weight
//   embed.position.weight        transformer.wpe.weight          (first seq_len rows)
//   blockN.ln1.{weight,bias}     transformer.h.N.ln_1.{weight,bias}
//   blockN.attn.qkv.weight       transformer.h.N.attn.c_attn.weight   (transposed)
//   blockN.attn.proj.weight      transformer.h.N.attn.c_proj.weight   (transposed)
//   blockN.ln2.{weight,bias}     transformer.h.N.ln_2.{weight,bias}
//   blockN.mlp.fc1.weight        transformer.h.N.mlp.c_fc.weight      (transposed)
//   blockN.mlp.fc2.weight        transformer.h.N.mlp.c_proj.weight    (transposed)
//   (biases: the same names with .bias, never transposed)
//   head.ln_f.{weight,bias}      transformer.ln_f.{weight,bias}
//   head.lm.weight               lm_head.weight, or transformer.wte.weight when tied
//
// LLaMA: nn.Linear layouts ([out, in]) as ours, nothing transposed. The runtime's rotary
// embedding is the Hugging Face one (rotate_half), so q_proj and k_proj load as they are
// stored: no permutation (Meta's original consolidated.*.pth files rotate interleaved
// pairs and need the permutation that Hugging Face's conversion script applies; they are
// not safetensors and are not read here).
//
//   ours                         Hugging Face LLaMA
//   embed.token.weight           model.embed_tokens.weight
//   blockN.ln1.weight            model.layers.N.input_layernorm.weight
//   blockN.attn.{q,k,v}.weight   model.layers.N.self_attn.{q,k,v}_proj.weight
//   blockN.attn.proj.weight      model.layers.N.self_attn.o_proj.weight
//   blockN.ln2.weight            model.layers.N.post_attention_layernorm.weight
//   blockN.mlp.{gate,up,down}.weight  model.layers.N.mlp.{gate,up,down}_proj.weight
//   head.norm.weight             model.norm.weight
//   head.lm.weight               lm_head.weight (model.embed_tokens.weight when tied)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/runtime/io/checkpoint.h"
#include "harp/runtime/exec/executor.h"

namespace harp::runtime {

struct HfName {
  std::string name;
  bool transposed = false;
};

// The Hugging Face name of one of our parameters (REQUIRES: a parameter of the family).
HfName hf_gpt2_name(const std::string& ours, bool tied);
HfName hf_llama_name(const std::string& ours, bool tied);
HfName hf_name(const std::string& ours, const model::ModelSpec& model);

// config.json for `model` (model::hf_config_json: its Hugging Face class with every field
// that class reads, max_position_embeddings = seq_len).
Json hf_config(const model::ModelSpec& model);

// Writes the weights (float32, Hugging Face names and layouts, a tied lm_head left out)
// and OUT_DIR/config.json from every parameter of `params` (a whole model under our
// global names): OUT_DIR/model.safetensors when they fit in max_shard_bytes, else
// model-0000i-of-0000n.safetensors shards of at most that each (a larger tensor alone)
// and model.safetensors.index.json, as save_pretrained writes them (its default: 5 GB);
// the other layout's files in OUT_DIR are removed. FailedPrecondition for a missing
// parameter.
inline constexpr std::int64_t kHfShardBytes = 5'000'000'000;
Status export_hf(const model::ModelSpec& model, const NamedTensors& params, const std::string& out_dir,
                 std::int64_t max_shard_bytes = kHfShardBytes);

// Loads a Hugging Face checkpoint of the model's family into this rank's parameters:
// `path` is a .safetensors file, or a folder with model.safetensors or the shards of
// model.safetensors.index.json. Only the tensors this rank holds are read. Errors name
// the file, the tensor and what does not match (shape, dtype, vocabulary, positions).
Status load_hf(Executor& ex, const model::ModelSpec& model, const std::string& path);
// The same into any parameters (global names), each placed in its full tensor by `shard_of`.
Status load_hf_params(const model::ModelSpec& model, const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& params,
                      const std::function<const Shard&(const std::string&)>& shard_of);

// The model a Hugging Face config.json describes (in the folder `path`, or beside the
// .safetensors file `path`; model::read_hf_config), granularity 1, when the runtime can
// compute it (check_trainable): an error naming the field otherwise.
StatusOr<model::ModelSpec> hf_model(const std::string& path);
// InvalidArgument when `model` has more parameters than the files at `path` hold numbers:
// checked before the model is built, so that a config.json describing a model larger than
// its weights (by mistake or on purpose) never allocates it.
Status check_hf_size(const model::ModelSpec& model, const std::string& path);

}  // namespace harp::runtime
