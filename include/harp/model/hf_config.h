// Hugging Face's config.json in and out: the model a hub folder describes, as harp's
// GptConfig, and the config.json an export writes back.
//
// Read: GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM (Qwen2 and Qwen2.5),
// Qwen3ForCausalLM and MistralForCausalLM (the `architectures` entry; `model_type` when
// there is none). Every field that changes what the model computes is used
// (rms_norm_eps, rope_theta, head_dim, sliding_window, rope scaling of type llama3,
// tie_word_embeddings, ...) or refused by name when harp does not compute it (another
// rope type, biases on o_proj or the MLP, sliding attention on some layers only, an
// activation other than the family's, dropout in a LLaMA-lineage config). Fields that
// change nothing computed (token ids, use_cache, torch_dtype, initializer_range, ...) are
// not read. GPT-2's dropout probabilities are not read either: harp trains without
// dropout (docs/runtime.md, Numerics), as its GPT-2 always has.
#pragma once

#include <string>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/model/model_spec.h"

namespace harp::model {

// The architectures read, in the order messages list them.
const std::vector<std::string>& hf_architectures();

// The model described by `path`: a config.json, or a folder holding one. seq_len is
// max_position_embeddings (a job may shorten it), the name the folder's, granularity 1.
// InvalidArgument naming the file, field, value, rule and fix for what cannot be read or
// computed; NotFound when there is no config.json.
StatusOr<GptConfig> read_hf_config(const std::string& path);

// The same from a parsed document; `file` names it in messages.
StatusOr<GptConfig> hf_config_from_json(const Json& doc, const std::string& file);

// Whether `doc` is a Hugging Face config (it has `architectures` or `model_type`).
bool is_hf_config(const Json& doc);

// The config.json of `c` (what harp export writes beside the weights): the class of its
// architecture (harp's own models: GPT2LMHeadModel or LlamaForCausalLM) with every field
// that class reads, so that transformers builds the same model from it.
Json hf_config_json(const GptConfig& c);

}  // namespace harp::model
