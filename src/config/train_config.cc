// The training section: parse, validate, print (see train_config.h). Messages name the
// file, the field path, the value, the rule and the fix.
#include "harp/config/train_config.h"

#include <cmath>

#include "harp/common/fields.h"
#include "harp/common/quantities.h"

namespace harp::config {
namespace {

// One of E's names (FieldReader::choice says which are allowed), parsed once.
template <class E>
void read_choice(FieldReader& r, const std::string& key, E* value) {
  parse_name(r.choice(key, names_of<E>(), name_of(*value)), value);
}

}  // namespace

Status TrainConfig::validate(const std::string& file, const std::string& path) const {
  auto bad = [&](const char* key, const Json& value, const std::string& rule, const std::string& fix) {
    // JSON has no NaN or infinity (dump() prints null): say what the user typed.
    std::string text = value.dump();
    if (value.is_number_float() && !std::isfinite(value.get<double>()))
      text = std::isnan(value.get<double>()) ? "nan" : value.get<double>() > 0 ? "inf" : "-inf";
    return field_error(file, join_path(path, key), text, rule, fix);
  };
  if (data.empty()) return bad("data", data, "must name a token file or be `synthetic`", "write `data: synthetic`");
  if (steps < 1) return bad("steps", steps, "must be at least 1", "train for 1 or more steps");
  auto range = [&](const char* key, const Quantity& q, double v) { return check_quantity(q, v, file, join_path(path, key)); };
  HARP_RETURN_IF_ERROR(range("lr", quantity::kLearningRate, lr));
  HARP_RETURN_IF_ERROR(range("min_lr", quantity::kMinLearningRate, min_lr));
  if (min_lr > lr) return bad("min_lr", min_lr, "must be at most lr", "use 0 (lr / 10) or a floor below lr");
  if (warmup_steps < 1) return bad("warmup_steps", warmup_steps, "must be at least 1", "use 1 for no warm-up");
  if (decay_steps < 0) return bad("decay_steps", decay_steps, "must be >= 0", "use 0 to decay over the run");
  HARP_RETURN_IF_ERROR(range("weight_decay", quantity::kWeightDecay, weight_decay));
  HARP_RETURN_IF_ERROR(range("grad_clip", quantity::kGradClip, grad_clip));
  // The enum-like settings are valid by type (parsed from their name tables); what is
  // left are the combinations.
  if (dtype == Dtype::kFloat16 && device == Device::kCpu)
    return bad("dtype", name_of(dtype), "computes on CUDA only (libtorch's CPU autocast is bf16)",
               "use `dtype: bfloat16` on the CPU, or `device: cuda`");
  if (grad_reduce_dtype == GradReduceDtype::kBFloat16 && device == Device::kCpu)
    return bad("grad_reduce_dtype", name_of(grad_reduce_dtype),
               "needs NCCL: Gloo (the CPU's) cannot all-reduce bfloat16",
               "use float16 or float32 on the CPU, or `device: cuda`");
  if (out.empty()) return bad("out", out, "must name a folder", "write `out: out/train`");
  if (checkpoint_every < 0) return bad("checkpoint_every", checkpoint_every, "must be >= 0", "use 0 for none");
  if (keep_checkpoints < 0)
    return bad("keep_checkpoints", keep_checkpoints, "must be >= 0", "use 0 to keep every checkpoint, or e.g. 3");
  for (size_t i = 0; i < trace_steps.size(); ++i)
    if (trace_steps[i] < 0 || trace_steps[i] >= steps)
      return field_error(file, join_path(path, "trace_steps[" + std::to_string(i) + "]"),
                         std::to_string(trace_steps[i]), "must be a 0-based step below steps (" +
                             std::to_string(steps) + ")",
                         "trace a step the run reaches, e.g. " + std::to_string(steps > 3 ? 3 : steps - 1));
  HARP_RETURN_IF_ERROR(range("timeout_s", quantity::kTimeoutS, timeout_s));
  if (threads < 1 || threads > 256) return bad("threads", threads, "must be 1..256", "use the cores per rank");
  if (eval_every < 1) return bad("eval_every", eval_every, "must be at least 1", "use e.g. 100");
  if (eval_batches < 1 || eval_batches > 100000)
    return bad("eval_batches", eval_batches, "must be 1..100000", "use e.g. 2");
  if (drift_threshold != 0 && !(drift_threshold > 1 && drift_threshold <= 100))
    return field_error(file, join_path(path, "drift_threshold"), std::to_string(drift_threshold),
                       "must be 0 (off) or in (1, 100]", "use e.g. 1.3 (a stage 30% slower than its baseline)");
  if (drift_window < 1 || drift_window > 10000)
    return bad("drift_window", drift_window, "must be 1..10000", "use e.g. 5");
  if (!(replan_min_gain >= 0 && replan_min_gain < 1))
    return field_error(file, join_path(path, "replan_min_gain"), std::to_string(replan_min_gain),
                       "must be 0 (off) or in (0, 1)", "use e.g. 0.1 (a plan 10% faster, restart counted)");
  if (replan_min_gain > 0 && drift_threshold == 0)
    return field_error(file, join_path(path, "replan_min_gain"), std::to_string(replan_min_gain),
                       "re-planning on drift needs drift detection, which drift_threshold 0 turns off",
                       "set drift_threshold too, e.g. 1.5");
  if (link_probe_every < 0 || link_probe_every > 1000000)
    return bad("link_probe_every", link_probe_every, "must be 0..1000000", "use 0 (no probes) or e.g. 10");
  if (sample_every < 0) return bad("sample_every", sample_every, "must be >= 0", "use 0 (no samples) or e.g. 100");
  if (sample_tokens < 1 || sample_tokens > 4096)
    return bad("sample_tokens", sample_tokens, "must be 1..4096", "use e.g. 64");
  if (sample_every > 0 && sample_prompt.empty())
    return field_error(file, join_path(path, "sample_prompt"), "\"\"", "must hold at least one character",
                       "leave it out (a newline) or give the text the samples continue");
  return Status();
}

StatusOr<TrainConfig> parse_train_config(const Json& node, const std::string& file, const std::string& path) {
  TrainConfig c;
  // `zero: 1` is a level, not a name: read as the name it spells.
  Json n = node;
  if (n.is_object() && n.contains("zero") && n["zero"].is_number_integer())
    n["zero"] = std::to_string(n["zero"].get<long long>());
  FieldReader r(n, file, path);
  if (r.failed()) return r.finish();
  c.data = r.string("data", c.data);
  if (c.data != "synthetic" && !c.data.empty()) c.data = resolve_relative_to(file, c.data);
  c.steps = static_cast<int>(r.integer("steps", 1, c.steps));
  c.seed = static_cast<std::uint64_t>(
      r.integer("seed", 0, static_cast<std::int64_t>(c.seed), std::numeric_limits<std::int64_t>::max()));
  c.lr = r.positive("lr", c.lr);
  c.min_lr = r.non_negative("min_lr", c.min_lr);
  c.warmup_steps = static_cast<int>(r.integer("warmup_steps", 1, c.warmup_steps));
  c.decay_steps = static_cast<int>(r.integer("decay_steps", 0, c.decay_steps));
  c.weight_decay = r.non_negative("weight_decay", c.weight_decay);
  c.grad_clip = r.non_negative("grad_clip", c.grad_clip);
  read_choice(r, "dtype", &c.dtype);
  read_choice(r, "device", &c.device);
  read_choice(r, "loss_scale", &c.loss_scale);
  read_choice(r, "grad_reduce_dtype", &c.grad_reduce_dtype);
  read_choice(r, "recompute", &c.recompute);
  read_choice(r, "zero", &c.zero);
  c.out = r.string("out", c.out);
  c.checkpoint_every = static_cast<int>(r.integer("checkpoint_every", 0, c.checkpoint_every));
  c.keep_checkpoints = static_cast<int>(r.integer("keep_checkpoints", 0, c.keep_checkpoints));
  c.async_checkpoints = r.boolean("async_checkpoints", c.async_checkpoints);
  if (const Json* t = r.get("trace_steps")) {
    bool good = t->is_array();
    if (good)
      for (const auto& v : *t) good = good && v.is_number_integer();
    if (!good)
      r.fail("trace_steps", t->dump(), "must be a list of step numbers", "write e.g. `trace_steps: [3, 4]`");
    else
      c.trace_steps = t->get<std::vector<int>>();
  }
  c.timeout_s = r.positive("timeout_s", c.timeout_s);
  c.threads = static_cast<int>(r.integer("threads", 1, c.threads));
  c.emulate = r.boolean("emulate", c.emulate);
  c.progress = r.boolean("progress", c.progress);
  c.init_from = r.string("init_from", c.init_from);
  if (!c.init_from.empty()) c.init_from = resolve_relative_to(file, c.init_from);
  c.val_data = r.string("val_data", c.val_data);
  if (!c.val_data.empty()) c.val_data = resolve_relative_to(file, c.val_data);
  c.eval_every = static_cast<int>(r.integer("eval_every", 1, c.eval_every));
  c.eval_batches = static_cast<int>(r.integer("eval_batches", 1, c.eval_batches));
  c.drift_threshold = r.number("drift_threshold", c.drift_threshold);
  c.drift_window = static_cast<int>(r.integer("drift_window", 1, c.drift_window));
  c.replan_min_gain = r.number("replan_min_gain", c.replan_min_gain);
  c.link_probe_every = static_cast<int>(r.integer("link_probe_every", 0, c.link_probe_every));
  c.sample_every = static_cast<int>(r.integer("sample_every", 0, c.sample_every));
  c.sample_prompt = r.string("sample_prompt", c.sample_prompt);
  c.sample_tokens = static_cast<int>(r.integer("sample_tokens", 1, c.sample_tokens));
  c.sample_tokenizer = r.string("sample_tokenizer", c.sample_tokenizer);
  if (c.sample_tokenizer != "byte") c.sample_tokenizer = resolve_relative_to(file, c.sample_tokenizer);
  HARP_RETURN_IF_ERROR(r.finish());
  HARP_RETURN_IF_ERROR(c.validate(file, path));
  return c;
}

Json train_config_to_json(const TrainConfig& c) {
  Json j = {{"data", c.data},
          {"steps", c.steps},
          {"seed", c.seed},
          {"lr", c.lr},
          {"min_lr", c.min_lr},
          {"warmup_steps", c.warmup_steps},
          {"decay_steps", c.decay_steps},
          {"weight_decay", c.weight_decay},
          {"grad_clip", c.grad_clip},
          {"dtype", name_of(c.dtype)},
          {"device", name_of(c.device)},
          {"loss_scale", name_of(c.loss_scale)},
          {"grad_reduce_dtype", name_of(c.grad_reduce_dtype)},
          {"recompute", name_of(c.recompute)},
          {"zero", name_of(c.zero)},
          {"out", c.out},
          {"checkpoint_every", c.checkpoint_every},
          {"keep_checkpoints", c.keep_checkpoints},
          {"async_checkpoints", c.async_checkpoints},
          {"trace_steps", c.trace_steps},
          {"timeout_s", c.timeout_s},
          {"threads", c.threads},
          {"emulate", c.emulate},
          {"progress", c.progress}};
  if (!c.init_from.empty()) j["init_from"] = c.init_from;
  if (!c.val_data.empty()) {
    j["val_data"] = c.val_data;
    j["eval_every"] = c.eval_every;
    j["eval_batches"] = c.eval_batches;
  }
  if (c.drift_threshold > 0) {
    j["drift_threshold"] = c.drift_threshold;
    j["drift_window"] = c.drift_window;
    if (c.replan_min_gain > 0) j["replan_min_gain"] = c.replan_min_gain;
  }
  if (c.link_probe_every > 0) j["link_probe_every"] = c.link_probe_every;
  if (c.sample_every > 0) {
    j["sample_every"] = c.sample_every;
    j["sample_prompt"] = c.sample_prompt;
    j["sample_tokens"] = c.sample_tokens;
    j["sample_tokenizer"] = c.sample_tokenizer;
  }
  return j;
}

}  // namespace harp::config
