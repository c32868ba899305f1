// Text generation from a trained GPT or LLaMA on one process (CPU or CUDA), without a
// plan's pipeline: `harp generate` (docs/runtime.md, "Generation").
//
// Two forwards compute the next token's logits:
// - with a KV cache (the default): each block keeps the keys and values of every position
//   so far ([kv_heads, capacity, head size] per block), and a new token costs one row of
//   every product. Written here on libtorch's operations, apart from the training layers.
// - without (`use_cache = false`): the training layers (nn/gpt.h) run over the whole
//   context at every token, as nanoGPT's sample.py does. The tests hold the two equal.
// The context is the model's seq_len: past it, the window slides (the last seq_len
// tokens, positions from 0, nanoGPT's crop), and each token then costs a forward over
// the window on either path.
//
// Sampling (sample_token) works on the logits in float64 on the CPU: temperature 0 is
// greedy (the first largest logit, as torch.argmax), else the logits are divided by the
// temperature, cut to the top_k largest (0: all), softmaxed, cut to the smallest set of
// the most likely tokens whose probabilities add up to top_p (1: all; ties kept in id
// order), renormalised and drawn with a 64-bit Mersenne Twister seeded by `seed`: the
// same seed gives the same tokens on every machine and device.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/runtime/io/checkpoint.h"
#include "harp/runtime/nn/gpt.h"

namespace harp::runtime {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int top_k = 0;             // 0: no cut
  double top_p = 1.0;        // 1: no cut
  std::uint64_t seed = 1;
};

// The next token for `logits` (the vocabulary's, 1-D, any dtype and device).
std::int64_t sample_token(const torch::Tensor& logits, const SamplingOptions& options, std::mt19937_64& rng);

class LanguageModel {
 public:
  // The whole model on one process, its weights from `params` (global names: a
  // checkpoint's, read_checkpoint; optimizer state ignored; a tied LM head may be
  // absent). InvalidArgument naming the parameter when one is missing or misshapen.
  static StatusOr<LanguageModel> from_params(const model::ModelSpec& model, const NamedTensors& params,
                                             torch::Dtype dtype, const torch::Device& device);
  // From a Hugging Face folder (or .safetensors file beside its config.json) of GPT-2 or
  // LLaMA: the model from config.json (hf_model), the weights by load_hf's rules.
  static StatusOr<LanguageModel> from_hf(const std::string& path, torch::Dtype dtype, const torch::Device& device);

  const model::ModelSpec& model() const { return model_; }

  // The cache of one sequence.
  struct Cache {
    std::vector<torch::Tensor> keys, values;  // per block: [kv_heads, seq_len, head size]
    std::int64_t length = 0;                  // positions filled
  };
  Cache new_cache() const;
  // Appends `ids` (positions cache.length onwards; REQUIRES cache.length + ids.size() <=
  // seq_len) and returns the logits after the last of them, [vocab].
  torch::Tensor forward_cached(const std::vector<std::int64_t>& ids, Cache& cache) const;
  // The logits after the last of `context` (1 to seq_len tokens) by the training layers.
  torch::Tensor forward_full(const std::vector<std::int64_t>& context) const;

 private:
  LanguageModel() = default;
  // The model's layers (seeded weights, to be overwritten), after check_trainable.
  static StatusOr<LanguageModel> with_layers(const model::ModelSpec& model, torch::Dtype dtype,
                                             const torch::Device& device);
  const torch::Tensor& weight(const std::string& name) const;

  model::ModelSpec model_;
  torch::Dtype dtype_ = torch::kFloat32;
  torch::Device device_ = torch::kCPU;
  std::vector<GptLayer> layers_;
  std::map<std::string, torch::Tensor> weights_;  // the layers' parameters by global name
};

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplingOptions sampling;
  bool use_cache = true;
};

struct GenerateResult {
  std::vector<std::int64_t> tokens;  // the new tokens only
  double prompt_s = 0;               // the prompt's forward (with the cache: the prefill)
  double decode_s = 0;               // every later token
};

// Generates up to max_new_tokens after `prompt` (at least one token), calling `on_token`
// with each as it comes (it may return false to stop). InvalidArgument for a token id
// outside the vocabulary or an empty prompt.
StatusOr<GenerateResult> generate(const LanguageModel& lm, const std::vector<std::int64_t>& prompt,
                                  const GenerateOptions& options,
                                  const std::function<bool(std::int64_t)>& on_token = nullptr);

}  // namespace harp::runtime
