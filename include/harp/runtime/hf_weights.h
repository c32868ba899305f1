// Hugging Face GPT-2 weights in and out (safetensors, harp/data/safetensors.h): the
// runtime's global parameter names mapped to GPT2LMHeadModel's, with its Conv1D weights
// stored transposed ([in, out]), the position table cut to the model's seq_len, and the
// LM head tied to wte (GPT-2 files carry no lm_head.weight; an untied model's is read).
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
#pragma once

#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/runtime/checkpoint.h"
#include "harp/runtime/executor.h"

namespace harp::runtime {

struct HfName {
  std::string name;
  bool transposed = false;
};

// The Hugging Face name of one of our parameters (REQUIRES: a GPT parameter name).
HfName hf_gpt2_name(const std::string& ours, bool tied);

// config.json of GPT2LMHeadModel for `model` (n_embd, n_layer, n_head, n_positions,
// vocab_size, n_inner, activation_function gelu_new, layer_norm_epsilon 1e-5, ...).
Json hf_gpt2_config(const model::ModelSpec& model);

// Writes OUT_DIR/model.safetensors (float32, Hugging Face names and layouts, tied
// lm_head left out) and OUT_DIR/config.json from every parameter of `params` (a whole
// model under our global names). FailedPrecondition for a non-GPT model or a missing
// parameter.
Status export_hf_gpt2(const model::ModelSpec& model, const NamedTensors& params, const std::string& out_dir);

// Loads a Hugging Face GPT-2 checkpoint into this rank's parameters: `path` is a
// .safetensors file, or a folder with model.safetensors or the shards of
// model.safetensors.index.json. Only the tensors this rank holds are read. Errors name
// the file, the tensor and what does not match (shape, dtype, vocabulary, positions).
Status load_hf_gpt2(Executor& ex, const model::ModelSpec& model, const std::string& path);

}  // namespace harp::runtime
