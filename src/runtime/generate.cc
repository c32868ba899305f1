// Generation (generate.h): the cached forward on libtorch's operations and runtime::linear,
// the uncached one through the training layers, and the sampler.
#include "harp/runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "harp/common/check.h"
#include "harp/runtime/io/hf_weights.h"
#include "harp/runtime/nn/linear.h"
#include "harp/runtime/nn/trainable.h"
#include "nn/gpt_pieces.h"

namespace harp::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Rotary embedding (rotate_half) at positions first..first+n-1 for heads of width d: the
// angles' cosines and sines [n, d], once per forward (every block and both of q and k
// use them), from the model's frequencies (its rope scaling included).
struct Rotary {
  torch::Tensor cos, sin;
  Rotary(std::int64_t first, std::int64_t n, std::int64_t d, const model::GptConfig& c,
         const torch::TensorOptions& options) {
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
    torch::Tensor angles = torch::outer(torch::arange(first, first + n, f64), rotary_inv_freq(c, d));
    angles = torch::cat({angles, angles}, -1);  // [n, d]
    cos = angles.cos().to(options);
    sin = angles.sin().to(options);
  }
  // x [heads, n, d]
  torch::Tensor operator()(const torch::Tensor& x) const {
    const std::int64_t d = x.size(2);
    const torch::Tensor rotated = torch::cat({-x.narrow(-1, d / 2, d / 2), x.narrow(-1, 0, d / 2)}, -1);
    return x * cos + rotated * sin;
  }
};

}  // namespace

std::int64_t sample_token(const torch::Tensor& logits, const SamplingOptions& o, std::mt19937_64& rng) {
  const torch::Tensor l = logits.detach().to(torch::kCPU, torch::kFloat64).contiguous().flatten();
  const double* v = l.data_ptr<double>();
  const std::int64_t n = l.numel();
  HARP_CHECK_GT(n, 0);
  if (o.temperature == 0 || o.top_k == 1)
    return std::max_element(v, v + n) - v;  // the first largest, as torch.argmax
  std::vector<std::int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; equal logits in id order.
  std::stable_sort(order.begin(), order.end(), [v](std::int64_t a, std::int64_t b) { return v[a] > v[b]; });
  std::size_t keep = order.size();
  if (o.top_k > 0) keep = std::min(keep, static_cast<std::size_t>(o.top_k));
  std::vector<double> p(keep);
  const double top = v[order[0]] / o.temperature;
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) total += p[i] = std::exp(v[order[i]] / o.temperature - top);
  if (o.top_p < 1) {
    double mass = 0;
    std::size_t cut = 0;
    while (cut < keep && mass < o.top_p * total) mass += p[cut++];
    keep = std::max<std::size_t>(cut, 1);
    total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
  double mass = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    mass += p[i];
    if (u < mass) return order[i];
  }
  return order[keep - 1];  // u within rounding of the total
}

StatusOr<LanguageModel> LanguageModel::with_layers(const model::ModelSpec& model, torch::Dtype dtype,
                                                   const torch::Device& device) {
  HARP_RETURN_IF_ERROR(check_trainable(model));
  LanguageModel lm;
  lm.model_ = model;
  lm.dtype_ = dtype;
  lm.device_ = device;
  lm.layers_ = build_gpt_layers(model, 0, model.num_layers(), 0, dtype, device);
  return lm;
}

StatusOr<LanguageModel> LanguageModel::from_params(const model::ModelSpec& model, const NamedTensors& params,
                                                   torch::Dtype dtype, const torch::Device& device) {
  HARP_ASSIGN_OR_RETURN(LanguageModel lm, with_layers(model, dtype, device));
  std::map<std::string, const torch::Tensor*> given;
  for (const auto& [name, t] : params) given[name] = &t;
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters(lm.layers_)) {
    auto it = given.find(name);
    if (it == given.end() && name == "head.lm.weight" && model.gpt.tied_embeddings) it = given.find("embed.token.weight");
    if (it == given.end())
      return invalid_argument("the weights have no `" + name + "`, a parameter of " + model.gpt.name +
                              "; fix: generate with the plan (or --model) the run was trained with");
    if (!it->second->sizes().equals(p.sizes()))
      return invalid_argument("the weights' `" + name + "` has " + std::to_string(it->second->numel()) +
                              " elements in another shape than the model's; fix: generate with the plan (or "
                              "--model) the run was trained with");
    p.copy_(*it->second);
    lm.weights_[name] = p;
  }
  return lm;
}

StatusOr<LanguageModel> LanguageModel::from_hf(const std::string& path, torch::Dtype dtype,
                                               const torch::Device& device) {
  HARP_ASSIGN_OR_RETURN(model::ModelSpec model, hf_model(path));
  HARP_RETURN_IF_ERROR(check_trainable(model));
  HARP_RETURN_IF_ERROR(check_hf_size(model, path));
  HARP_ASSIGN_OR_RETURN(LanguageModel lm, with_layers(model, dtype, device));
  std::map<std::string, Shard> shards;
  for (const auto& layer : lm.layers_) shards.insert(layer->shards().begin(), layer->shards().end());
  const auto params = named_parameters(lm.layers_);
  HARP_RETURN_IF_ERROR(load_hf_params(model, path, params,
                                      [&shards](const std::string& name) -> const Shard& { return shards.at(name); }));
  for (const auto& [name, p] : params) lm.weights_[name] = p;
  return lm;
}

const torch::Tensor& LanguageModel::weight(const std::string& name) const {
  const auto it = weights_.find(name);
  HARP_CHECK(it != weights_.end()) << "no parameter " << name;
  return it->second;
}

LanguageModel::Cache LanguageModel::new_cache() const {
  const auto& c = model_.gpt;
  const std::int64_t kv = c.family == "llama" ? c.kv_heads : c.heads, d = c.head_size();
  Cache cache;
  for (int b = 0; b < c.num_blocks; ++b) {
    cache.keys.push_back(torch::zeros({kv, c.seq_len, d}, torch::TensorOptions().dtype(dtype_).device(device_)));
    cache.values.push_back(torch::zeros_like(cache.keys.back()));
  }
  return cache;
}

torch::Tensor LanguageModel::forward_cached(const std::vector<std::int64_t>& ids, Cache& cache) const {
  const auto& c = model_.gpt;
  const bool llama = c.family == "llama";
  const std::int64_t n = static_cast<std::int64_t>(ids.size()), past = cache.length, h = c.hidden;
  const std::int64_t heads = c.heads, kv = llama ? c.kv_heads : c.heads, d = c.head_size(), group = heads / kv;
  const std::int64_t qw = heads * d;  // the width of q (hidden unless head_dim says)
  HARP_CHECK(n >= 1 && past + n <= c.seq_len) << past << " + " << n << " positions of " << c.seq_len;
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::tensor(ids, torch::kInt64).to(device_);
  torch::Tensor x = weight("embed.token.weight").index_select(0, tokens);  // [n, h]
  if (!llama) x = x + weight("embed.position.weight").narrow(0, past, n);
  auto norm = [&](const torch::Tensor& t, const std::string& prefix) {
    if (llama) return rms_norm(t, weight(prefix + ".weight"), c.norm_eps);
    return torch::layer_norm(t, {h}, weight(prefix + ".weight"), weight(prefix + ".bias"), c.norm_eps);
  };
  auto bias = [&](const std::string& name) { return llama ? torch::Tensor() : weight(name); };
  auto qkv_bias = [&](const std::string& name) { return c.qkv_bias ? weight(name) : torch::Tensor(); };
  auto head_norm = [&](const torch::Tensor& t, const std::string& name) {  // Qwen3: per head, before rotary
    return c.qk_norm ? rms_norm(t, weight(name), c.norm_eps) : t;
  };
  // Query i (position past + i) sees keys 0..past + i (the last sliding_window of them).
  std::optional<Rotary> rotary;
  if (llama) rotary.emplace(past, n, d, c, x.options());
  torch::Tensor mask;  // true where a score is masked
  if (n > 1 || (c.sliding_window > 0 && past + n > c.sliding_window))
    mask = attention_allowed(past, n, past + n, c.sliding_window, device_).logical_not();
  for (int b = 0; b < c.num_blocks; ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    torch::Tensor y = norm(x, p + "ln1"), q, k, v;
    if (llama) {
      q = runtime::linear(y, weight(p + "attn.q.weight"), qkv_bias(p + "attn.q.bias"));
      k = runtime::linear(y, weight(p + "attn.k.weight"), qkv_bias(p + "attn.k.bias"));
      v = runtime::linear(y, weight(p + "attn.v.weight"), qkv_bias(p + "attn.v.bias"));
    } else {
      const torch::Tensor qkv = runtime::linear(y, weight(p + "attn.qkv.weight"), weight(p + "attn.qkv.bias"));
      q = qkv.narrow(1, 0, h);
      k = qkv.narrow(1, h, h);
      v = qkv.narrow(1, 2 * h, h);
    }
    q = q.reshape({n, heads, d}).transpose(0, 1);  // [heads, n, d]
    k = k.reshape({n, kv, d}).transpose(0, 1);
    v = v.reshape({n, kv, d}).transpose(0, 1);
    if (llama) {
      q = (*rotary)(head_norm(q, p + "attn.q_norm.weight"));
      k = (*rotary)(head_norm(k, p + "attn.k_norm.weight"));
    }
    cache.keys[b].narrow(1, past, n).copy_(k);
    cache.values[b].narrow(1, past, n).copy_(v);
    const torch::Tensor keys = cache.keys[b].narrow(1, 0, past + n), values = cache.values[b].narrow(1, 0, past + n);
    // Grouped-query attention: query head i reads key/value head i / group.
    torch::Tensor scores = torch::matmul(q.reshape({kv, group * n, d}), keys.transpose(1, 2)) / std::sqrt(double(d));
    scores = scores.reshape({heads, n, past + n});
    if (mask.defined()) scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
    torch::Tensor probs = torch::softmax(scores, -1);
    torch::Tensor context = torch::matmul(probs.reshape({kv, group * n, past + n}), values);  // [kv, group n, d]
    context = context.reshape({heads, n, d}).transpose(0, 1).reshape({n, qw});
    x = x + runtime::linear(context, weight(p + "attn.proj.weight"), bias(p + "attn.proj.bias"));
    y = norm(x, p + "ln2");
    if (llama) {
      x = x + runtime::linear(torch::silu(runtime::linear(y, weight(p + "mlp.gate.weight"))) * runtime::linear(y, weight(p + "mlp.up.weight")),
                     weight(p + "mlp.down.weight"));
    } else {
      x = x + runtime::linear(torch::gelu(runtime::linear(y, weight(p + "mlp.fc1.weight"), weight(p + "mlp.fc1.bias")), "tanh"),
                     weight(p + "mlp.fc2.weight"), weight(p + "mlp.fc2.bias"));
    }
  }
  cache.length = past + n;
  const torch::Tensor last = norm(x.narrow(0, n - 1, 1), llama ? "head.norm" : "head.ln_f");
  return runtime::linear(last, weight("head.lm.weight")).reshape({-1});
}

torch::Tensor LanguageModel::forward_full(const std::vector<std::int64_t>& context) const {
  HARP_CHECK(!context.empty() && static_cast<std::int64_t>(context.size()) <= model_.gpt.seq_len);
  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::tensor(context, torch::kInt64).reshape({1, -1}).to(device_);
  for (GptLayer layer : layers_) x = layer->forward(x);  // a holder copy: forward is not const
  return x[0][x.size(1) - 1];
}

StatusOr<GenerateResult> generate(const LanguageModel& lm, const std::vector<std::int64_t>& prompt,
                                  const GenerateOptions& o, const std::function<bool(std::int64_t)>& on_token) {
  const auto& c = lm.model().gpt;
  if (prompt.empty()) return invalid_argument("the prompt has no tokens; give at least one");
  for (const std::int64_t id : prompt)
    if (id < 0 || id >= c.vocab)
      return invalid_argument("the prompt holds token " + std::to_string(id) + ", outside the model's vocabulary of " +
                              std::to_string(c.vocab) + "; fix: use the tokenizer the model was trained with");
  std::mt19937_64 rng(o.sampling.seed);
  std::vector<std::int64_t> all = prompt;
  GenerateResult result;
  LanguageModel::Cache cache;
  if (o.use_cache) cache = lm.new_cache();
  const std::int64_t window = c.seq_len;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.max_new_tokens; ++i) {
    const std::int64_t total = static_cast<std::int64_t>(all.size());
    const std::vector<std::int64_t> context(all.end() - std::min(total, window), all.end());
    torch::Tensor logits;
    if (!o.use_cache) {
      logits = lm.forward_full(context);
    } else if (total <= window) {  // the cache holds every token but the newest ones
      logits = lm.forward_cached(std::vector<std::int64_t>(all.begin() + cache.length, all.end()), cache);
    } else {  // the window slid: every position moved, so nothing cached is valid
      cache.length = 0;
      logits = lm.forward_cached(context, cache);
    }
    const std::int64_t next = sample_token(logits, o.sampling, rng);
    if (i == 0) {
      result.prompt_s = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
    }
    all.push_back(next);
    result.tokens.push_back(next);
    if (on_token && !on_token(next)) break;
  }
  if (!result.tokens.empty()) result.decode_s = seconds_since(t0);
  return result;
}

}  // namespace harp::runtime
