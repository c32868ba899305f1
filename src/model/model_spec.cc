#include <filesystem>

#include "harp/common/fields.h"
#include "harp/model/hf_config.h"
#include "harp/model/model_spec.h"

namespace harp::model {

StatusOr<ModelSpec> parse_model(const Json& node, const std::string& file,
                                const std::string& path) {
  FieldReader r(node, file, path);
  if (r.failed()) return r.finish();
  r.integer("version", 1, 1);
  const bool family_given = r.has("family");
  const std::string family = r.choice("family", {"gpt", "llama"}, std::string("gpt"));
  if (r.failed()) return r.finish();
  GptConfig c;
  c.family = family;
  if (r.has("preset")) {
    std::string preset = r.string("preset");
    auto p = gpt_preset(preset);
    if (!p.ok())
      return field_error(file, r.path_of("preset"), Json(preset).dump(), "is not a known preset",
                         p.status().message().substr(p.status().message().find("use one of")));
    if (family_given && p->family != family)
      return field_error(file, r.path_of("family"), Json(family).dump(),
                         "does not match the preset " + preset + " (family " + p->family + ")",
                         "drop `family` or set it to " + p->family);
    c = *p;
  } else if (r.has("hf_config")) {
    const std::string hf = r.string("hf_config");
    if (r.failed()) return r.finish();
    auto read = read_hf_config(resolve_relative_to(file, hf));
    if (!read.ok())
      return field_error(file, r.path_of("hf_config"), Json(hf).dump(), read.status().message(),
                         "name a Hugging Face config.json, or the folder holding it");
    if (family_given && read->family != family)
      return field_error(file, r.path_of("family"), Json(family).dump(),
                         "does not match the config's family (" + read->family + ")", "drop `family`");
    c = *read;
  }
  const bool llama = c.family == "llama";
  auto opt_int = [&](const char* key, int current) {
    return static_cast<int>(r.integer(key, 1, current > 0 ? std::optional<std::int64_t>(current)
                                                          : std::nullopt));
  };
  c.num_blocks = opt_int("num_blocks", c.num_blocks);
  c.hidden = opt_int("hidden", c.hidden);
  c.heads = opt_int("heads", c.heads);
  c.seq_len = opt_int("seq_len", c.seq_len);
  c.vocab = opt_int("vocab", c.vocab);
  const int default_ffn = llama ? llama_ffn_hidden(std::max(c.hidden, 1)) : 4 * std::max(c.hidden, 1);
  c.ffn_hidden = opt_int("ffn_hidden", c.ffn_hidden > 0 ? c.ffn_hidden : default_ffn);
  c.granularity = static_cast<int>(r.integer("granularity", 1, 1));
  // Presets and configs say whether they are tied; a custom LLaMA is untied.
  c.tied_embeddings = r.boolean("tied_embeddings", r.has("preset") || r.has("hf_config") ? c.tied_embeddings : !llama);
  c.norm_eps = r.positive("norm_eps", c.norm_eps);
  if (llama) {
    c.kv_heads = opt_int("kv_heads", c.kv_heads > 0 ? c.kv_heads : std::max(c.heads, 1));
    c.rope_theta = r.number("rope_theta", c.rope_theta);
    if (r.has("head_dim")) c.head_dim = static_cast<int>(r.integer("head_dim", 1));
    c.qkv_bias = r.boolean("qkv_bias", c.qkv_bias);
    c.qk_norm = r.boolean("qk_norm", c.qk_norm);
    if (r.has("sliding_window")) c.sliding_window = static_cast<int>(r.integer("sliding_window", 0));
    if (const Json* rs = r.get("rope_scaling"); rs != nullptr) {
      FieldReader s(*rs, file, r.path_of("rope_scaling"));
      c.rope_scaling.type = s.choice("type", {"llama3"});
      c.rope_scaling.factor = s.positive("factor");
      c.rope_scaling.low_freq_factor = s.positive("low_freq_factor");
      c.rope_scaling.high_freq_factor = s.positive("high_freq_factor");
      c.rope_scaling.original_max_position_embeddings =
          static_cast<int>(s.integer("original_max_position_embeddings", 1));
      HARP_RETURN_IF_ERROR(s.finish());
    }
    if (r.has("architecture")) {
      std::vector<std::string> names = hf_architectures();
      names.erase(names.begin());  // GPT2LMHeadModel is the gpt family's
      c.architecture = r.choice("architecture", names);
    }
  }
  c.name = r.string("name", c.name.empty() ? std::string("custom") : c.name);
  HARP_RETURN_IF_ERROR(r.finish());
  return build_gpt(c, file, path);
}

StatusOr<ModelSpec> load_model(const std::string& preset_or_file, int granularity_override) {
  Json node;
  std::string file;
  // A preset name is a known word; anything else is a path (whose problems — missing,
  // a loop of links, not a file — the hardened reader names).
  std::error_code ec;
  if (std::filesystem::is_directory(preset_or_file, ec)) {  // a Hugging Face folder
    node = {{"hf_config", std::filesystem::absolute(preset_or_file).string()}};
    file = preset_or_file;
  } else if (!gpt_preset(preset_or_file).ok()) {
    auto doc = load_document(preset_or_file);
    if (!doc.ok() && doc.status().message().find(": cannot open: No such file") != std::string::npos)
      return not_found("`" + shown_path(preset_or_file) + "` is neither a model file nor a preset; " +
                       gpt_preset(preset_or_file).status().message().substr(
                           gpt_preset(preset_or_file).status().message().find("use one of")));
    HARP_ASSIGN_OR_RETURN(node, std::move(doc));
    file = preset_or_file;
    if (is_hf_config(node)) node = {{"hf_config", std::filesystem::absolute(preset_or_file).string()}};
  } else {
    node = {{"preset", preset_or_file}};
    file = "<preset>";
  }
  if (granularity_override > 0 && node.is_object()) node["granularity"] = granularity_override;
  return parse_model(node, file, file == "<preset>" ? "model" : "");
}

Json model_to_json(const ModelSpec& m) {
  const auto& c = m.gpt;
  Json j = {{"family", m.family},     {"name", c.name},         {"num_blocks", c.num_blocks},
            {"hidden", c.hidden},     {"heads", c.heads},       {"seq_len", c.seq_len},
            {"vocab", c.vocab},       {"ffn_hidden", c.ffn_hidden},
            {"granularity", c.granularity}, {"tied_embeddings", c.tied_embeddings}};
  // Only what differs from the defaults: the JSON (and so the fingerprints) of the models
  // that have none of the parts stays as it was.
  if (c.norm_eps != GptConfig().norm_eps) j["norm_eps"] = c.norm_eps;
  if (m.family == "llama") {
    j["kv_heads"] = c.kv_heads;
    j["rope_theta"] = c.rope_theta;
    if (c.head_dim > 0) j["head_dim"] = c.head_dim;
    if (c.qkv_bias) j["qkv_bias"] = true;
    if (c.qk_norm) j["qk_norm"] = true;
    if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
    if (!c.rope_scaling.type.empty())
      j["rope_scaling"] = {{"type", c.rope_scaling.type},
                           {"factor", c.rope_scaling.factor},
                           {"low_freq_factor", c.rope_scaling.low_freq_factor},
                           {"high_freq_factor", c.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
    if (!c.architecture.empty()) j["architecture"] = c.architecture;
  }
  return j;
}

}  // namespace harp::model
