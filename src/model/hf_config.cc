// Hugging Face config.json in and out (see hf_config.h). The defaults are those of each
// transformers configuration class (5.x) for a field the file leaves out.
#include "harp/model/hf_config.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "harp/common/fields.h"
#include "harp/common/format.h"

namespace harp::model {
namespace {

namespace fs = std::filesystem;

// The families, each with the defaults its transformers class gives a missing field.
struct Architecture {
  const char* name;
  const char* model_type;
  const char* family;    // harp's: gpt or llama
  int default_head_dim;  // 0: hidden / heads
  bool qkv_bias, qk_norm;
  bool has_sliding_window;        // Mistral's window applies to every layer
  bool sliding_window_optional;   // Qwen's: only with use_sliding_window, from max_window_layers on
  bool has_attention_bias_field;  // LLaMA's and Qwen3's attention_bias (q, k, v and o)
};

constexpr Architecture kArchitectures[] = {
    {"GPT2LMHeadModel", "gpt2", "gpt", 0, false, false, false, false, false},
    {"LlamaForCausalLM", "llama", "llama", 0, false, false, false, false, true},
    {"Qwen2ForCausalLM", "qwen2", "llama", 0, true, false, false, true, false},
    {"Qwen3ForCausalLM", "qwen3", "llama", 128, false, true, false, true, true},
    {"MistralForCausalLM", "mistral", "llama", 0, false, false, true, false, false},
};

// Reads fields of one config.json; messages name the file, the field and its value.
class Fields {
 public:
  Fields(const Json& doc, std::string file) : doc_(doc), file_(std::move(file)) {}

  const Json* get(const std::string& key) const {
    const auto it = doc_.find(key);
    return it == doc_.end() || it->is_null() ? nullptr : &*it;
  }
  Status refuse(const std::string& key, const Json& value, const std::string& rule, const std::string& fix) const {
    return field_error(file_, key, value.dump().substr(0, 80), rule, fix);
  }
  // A positive integer; `fallback` when absent or null (none: required).
  StatusOr<int> positive(const std::string& key, std::optional<long long> fallback) const {
    const Json* v = get(key);
    if (v == nullptr) {
      if (fallback) return static_cast<int>(*fallback);
      return field_error(file_, key, "", "is missing; it is a positive integer of the model's config",
                         "use the config.json the model was saved with");
    }
    if (!v->is_number_integer() || v->get<long long>() <= 0 || v->get<long long>() > (1LL << 30))
      return refuse(key, *v, "must be a positive integer (up to 2^30)", "use the config.json the model was saved with");
    return static_cast<int>(v->get<long long>());
  }
  StatusOr<double> number(const std::string& key, double fallback) const {
    const Json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()))
      return refuse(key, *v, "must be a finite number", "use the config.json the model was saved with");
    return v->get<double>();
  }
  StatusOr<bool> flag(const std::string& key, bool fallback) const {
    const Json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean())
      return refuse(key, *v, "must be true or false", "use the config.json the model was saved with");
    return v->get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    const Json* v = get(key);
    return v != nullptr && v->is_string() ? v->get<std::string>() : fallback;
  }
  const std::string& file() const { return file_; }
  // Whether the file has the key at all (null included).
  bool has(const std::string& key) const { return doc_.contains(key); }

 private:
  const Json& doc_;
  std::string file_;
};

std::string architecture_list() {
  std::string out;
  for (const auto& a : kArchitectures) out += std::string(out.empty() ? "" : ", ") + a.name;
  return out;
}

// The rotary parameters: rope_theta and rope_scaling at the top (transformers 4.x and
// the hub's files), or one rope_parameters object (what transformers 5 writes).
Status read_rope(const Fields& f, GptConfig* c) {
  const Json* params = f.get("rope_parameters");
  const Json* scaling = params != nullptr ? params : f.get("rope_scaling");
  const std::string where = params != nullptr ? "rope_parameters" : "rope_scaling";
  HARP_ASSIGN_OR_RETURN(c->rope_theta, f.number("rope_theta", c->rope_theta));
  if (scaling == nullptr) return Status();
  if (!scaling->is_object())
    return f.refuse(where, *scaling, "must be an object of rotary parameters", "use the model's own config.json");
  if (const auto it = scaling->find("rope_theta"); it != scaling->end() && it->is_number())
    c->rope_theta = it->get<double>();
  if (const auto it = scaling->find("partial_rotary_factor");
      it != scaling->end() && !(it->is_number() && it->get<double>() == 1.0))
    return f.refuse(where + ".partial_rotary_factor", *it, "harp rotates every dimension of a head (1.0)",
                    "such a model is not supported");
  std::string type = "default";
  for (const char* key : {"rope_type", "type"})
    if (const auto it = scaling->find(key); it != scaling->end() && it->is_string()) type = it->get<std::string>();
  if (type == "default") return Status();
  if (type != "llama3")
    return f.refuse(where + ".rope_type", Json(type),
                    "harp computes rotary embeddings without scaling (default) and with LLaMA 3.1's (llama3)",
                    "such a model (linear, dynamic, yarn or longrope scaling) is not supported");
  RopeScaling& r = c->rope_scaling;
  r.type = type;
  auto need = [&](const char* key, double* out) -> Status {
    const auto it = scaling->find(key);
    if (it == scaling->end() || !it->is_number() || !(it->get<double>() > 0))
      return field_error(f.file(), where + "." + key, it == scaling->end() ? "" : it->dump().substr(0, 40),
                         "llama3 scaling needs a positive number here", "use the model's own config.json");
    *out = it->get<double>();
    return Status();
  };
  double original = 0;
  HARP_RETURN_IF_ERROR(need("factor", &r.factor));
  HARP_RETURN_IF_ERROR(need("low_freq_factor", &r.low_freq_factor));
  HARP_RETURN_IF_ERROR(need("high_freq_factor", &r.high_freq_factor));
  HARP_RETURN_IF_ERROR(need("original_max_position_embeddings", &original));
  r.original_max_position_embeddings = static_cast<int>(original);
  if (!(r.high_freq_factor > r.low_freq_factor))
    return field_error(f.file(), where + ".high_freq_factor", fmt("%g", r.high_freq_factor),
                       "must exceed low_freq_factor (" + fmt("%g", r.low_freq_factor) + ")",
                       "use the model's own config.json");
  return Status();
}

// Sliding attention: Mistral's window on every layer; Qwen's only when use_sliding_window,
// and then on the layers from max_window_layers on (refused: harp's layers are alike).
Status read_window(const Fields& f, const Architecture& a, GptConfig* c) {
  if (const Json* types = f.get("layer_types"); types != nullptr) {
    if (!types->is_array()) return f.refuse("layer_types", *types, "must be a list", "use the model's own config.json");
    for (const Json& t : *types)
      if (!(t.is_string() && t.get<std::string>() == "full_attention"))
        return f.refuse("layer_types", *types, "harp's layers all attend alike (full_attention)",
                        "such a model (sliding attention on some layers) is not supported");
  }
  if (a.sliding_window_optional) {
    HARP_ASSIGN_OR_RETURN(const bool on, f.flag("use_sliding_window", false));
    if (on)
      return f.refuse("use_sliding_window", Json(true),
                      "slides the window on the layers from max_window_layers on; harp's layers all attend alike",
                      "set it to false (the released Qwen models train with it off)");
    return Status();
  }
  if (!a.has_sliding_window) {
    if (const Json* w = f.get("sliding_window"))
      return f.refuse("sliding_window", *w, std::string(a.name) + " has no sliding window",
                      "remove the field, or use MistralForCausalLM");
    return Status();
  }
  // Absent: MistralConfig's 4096; null: none (the later Mistral releases).
  HARP_ASSIGN_OR_RETURN(c->sliding_window, f.positive("sliding_window", f.has("sliding_window") ? 0 : 4096));
  return Status();
}

StatusOr<GptConfig> read_llama_lineage(const Fields& f, const Architecture& a, GptConfig c) {
  HARP_ASSIGN_OR_RETURN(c.hidden, f.positive("hidden_size", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.num_blocks, f.positive("num_hidden_layers", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.heads, f.positive("num_attention_heads", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.kv_heads, f.positive("num_key_value_heads", c.heads));
  HARP_ASSIGN_OR_RETURN(c.ffn_hidden, f.positive("intermediate_size", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.vocab, f.positive("vocab_size", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.seq_len, f.positive("max_position_embeddings", std::nullopt));
  const int natural = c.hidden / c.heads;
  HARP_ASSIGN_OR_RETURN(const int head_dim,
                        f.positive("head_dim", a.default_head_dim > 0 ? a.default_head_dim : natural));
  c.head_dim = head_dim == natural && c.hidden % c.heads == 0 ? 0 : head_dim;
  HARP_ASSIGN_OR_RETURN(c.norm_eps, f.number("rms_norm_eps", 1e-6));
  if (!(c.norm_eps > 0 && c.norm_eps < 1))
    return f.refuse("rms_norm_eps", Json(c.norm_eps), "must be in (0, 1)", "use the model's own config.json");
  HARP_ASSIGN_OR_RETURN(c.tied_embeddings, f.flag("tie_word_embeddings", false));
  if (const std::string act = f.text("hidden_act", "silu"); act != "silu")
    return f.refuse("hidden_act", Json(act), "the LLaMA lineage's MLP is SwiGLU (silu)",
                    "such a model is not supported");
  if (a.has_attention_bias_field) {
    HARP_ASSIGN_OR_RETURN(const bool bias, f.flag("attention_bias", false));
    if (bias)
      return f.refuse("attention_bias", Json(true),
                      "puts biases on q, k, v and o_proj; harp's LLaMA lineage has them on q, k and v only (Qwen2's)",
                      "such a model is not supported");
  }
  HARP_ASSIGN_OR_RETURN(const bool mlp_bias, f.flag("mlp_bias", false));
  if (mlp_bias)
    return f.refuse("mlp_bias", Json(true), "harp's SwiGLU MLP has no biases", "such a model is not supported");
  HARP_ASSIGN_OR_RETURN(const double dropout, f.number("attention_dropout", 0.0));
  if (dropout != 0)
    return f.refuse("attention_dropout", Json(dropout), "harp trains without dropout",
                    "set it to 0.0 (the released models' value)");
  c.qkv_bias = a.qkv_bias;
  c.qk_norm = a.qk_norm;
  HARP_RETURN_IF_ERROR(read_rope(f, &c));
  HARP_RETURN_IF_ERROR(read_window(f, a, &c));
  return c;
}

StatusOr<GptConfig> read_gpt2(const Fields& f, GptConfig c) {
  HARP_ASSIGN_OR_RETURN(c.hidden, f.positive("n_embd", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.num_blocks, f.positive("n_layer", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.heads, f.positive("n_head", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.vocab, f.positive("vocab_size", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.seq_len, f.positive("n_positions", std::nullopt));
  HARP_ASSIGN_OR_RETURN(c.ffn_hidden, f.positive("n_inner", std::min(4LL * c.hidden, 1LL << 30)));
  const std::string act = f.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    return f.refuse("activation_function", Json(act), "harp's GPT uses GELU with the tanh approximation (gelu_new)",
                    "such a model is not supported");
  HARP_ASSIGN_OR_RETURN(c.norm_eps, f.number("layer_norm_epsilon", 1e-5));
  if (!(c.norm_eps > 0 && c.norm_eps < 1))
    return f.refuse("layer_norm_epsilon", Json(c.norm_eps), "must be in (0, 1)", "use the model's own config.json");
  HARP_ASSIGN_OR_RETURN(c.tied_embeddings, f.flag("tie_word_embeddings", true));
  return c;
}

}  // namespace

const std::vector<std::string>& hf_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& a : kArchitectures) v.push_back(a.name);
    return v;
  }();
  return names;
}

bool is_hf_config(const Json& doc) {
  return doc.is_object() && (doc.contains("architectures") || doc.contains("model_type"));
}

StatusOr<GptConfig> hf_config_from_json(const Json& doc, const std::string& file) {
  if (!doc.is_object()) return field_error(file, "", "", "is not a JSON object", "use the model's own config.json");
  const Fields f(doc, file);
  const Architecture* arch = nullptr;
  if (const Json* list = f.get("architectures")) {
    if (!list->is_array() || list->empty() || !(*list)[0].is_string())
      return f.refuse("architectures", *list, "must be a list naming the model's class",
                      "use the model's own config.json");
    for (const auto& a : kArchitectures)
      if ((*list)[0].get<std::string>() == a.name) arch = &a;
    if (arch == nullptr)
      return f.refuse("architectures", *list, "harp reads " + architecture_list(),
                      "use a model of one of these families");
  } else {
    const std::string type = f.text("model_type", "");
    for (const auto& a : kArchitectures)
      if (type == a.model_type) arch = &a;
    if (arch == nullptr)
      return f.refuse("model_type", Json(type), "harp reads " + architecture_list(),
                      "use a model of one of these families");
  }
  GptConfig c;
  c.family = arch->family;
  if (c.family == "llama") c.architecture = arch->name;  // GPT-2 has one class
  c.name = "custom";
  return c.family == "gpt" ? read_gpt2(f, c) : read_llama_lineage(f, *arch, c);
}

StatusOr<GptConfig> read_hf_config(const std::string& path) {
  std::error_code ec;
  const bool folder = fs::is_directory(path, ec);
  const std::string file = folder ? (fs::path(path) / "config.json").string() : path;
  if (!fs::is_regular_file(file, ec))
    return not_found(shown_path(file) +
                     ": no such file; a Hugging Face model's folder holds config.json beside "
                     "its weights (give the folder or the file)");
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  HARP_ASSIGN_OR_RETURN(GptConfig c, hf_config_from_json(doc, shown_path(file)));
  const std::string dir = fs::path(file).parent_path().filename().string();
  if (!dir.empty() && dir != "." && dir != "..") c.name = dir;
  return c;
}

Json hf_config_json(const GptConfig& c) {
  if (c.family != "llama")
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_embd", c.hidden},
            {"n_layer", c.num_blocks},
            {"n_head", c.heads},
            {"n_positions", c.seq_len},
            {"n_ctx", c.seq_len},
            {"vocab_size", c.vocab},
            {"n_inner", c.ffn_hidden},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", c.norm_eps},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", c.tied_embeddings},
            {"torch_dtype", "float32"}};
  // The config's own class; for harp's own models, the one whose parts they have.
  const char* name = c.qk_norm              ? "Qwen3ForCausalLM"
                     : c.qkv_bias           ? "Qwen2ForCausalLM"
                     : c.sliding_window > 0 ? "MistralForCausalLM"
                                            : "LlamaForCausalLM";
  if (!c.architecture.empty()) name = c.architecture.c_str();
  const Architecture* arch = &kArchitectures[1];
  for (const auto& a : kArchitectures)
    if (std::string(name) == a.name) arch = &a;
  Json rope = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  if (c.rope_scaling.type == "llama3")
    rope = {{"rope_type", "llama3"},
            {"rope_theta", c.rope_theta},
            {"factor", c.rope_scaling.factor},
            {"low_freq_factor", c.rope_scaling.low_freq_factor},
            {"high_freq_factor", c.rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  Json j = {{"architectures", {arch->name}},
            {"model_type", arch->model_type},
            {"hidden_size", c.hidden},
            {"intermediate_size", c.ffn_hidden},
            {"num_hidden_layers", c.num_blocks},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_heads},
            {"head_dim", c.head_size()},
            {"max_position_embeddings", c.seq_len},
            {"vocab_size", c.vocab},
            {"hidden_act", "silu"},
            {"rms_norm_eps", c.norm_eps},
            {"rope_theta", c.rope_theta},
            {"rope_parameters", rope},
            {"attention_dropout", 0.0},
            {"tie_word_embeddings", c.tied_embeddings},
            {"torch_dtype", "float32"}};
  if (arch->has_attention_bias_field) j["attention_bias"] = false;
  if (std::string(arch->name) == "LlamaForCausalLM") j["mlp_bias"] = false;
  if (arch->sliding_window_optional) j["use_sliding_window"] = false;
  if (arch->has_sliding_window) j["sliding_window"] = c.sliding_window > 0 ? Json(c.sliding_window) : Json();
  return j;
}

}  // namespace harp::model
