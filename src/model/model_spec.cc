#include <filesystem>

#include "harp/common/fields.h"
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
  c.tied_embeddings = r.boolean("tied_embeddings", !llama);  // every LLaMA is untied
  if (llama) {
    c.kv_heads = opt_int("kv_heads", c.kv_heads > 0 ? c.kv_heads : std::max(c.heads, 1));
    c.rope_theta = r.number("rope_theta", c.rope_theta);
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
  if (!gpt_preset(preset_or_file).ok()) {
    auto doc = load_document(preset_or_file);
    if (!doc.ok() && doc.status().message().find(": cannot open: No such file") != std::string::npos)
      return not_found("`" + shown_path(preset_or_file) + "` is neither a model file nor a preset; " +
                       gpt_preset(preset_or_file).status().message().substr(
                           gpt_preset(preset_or_file).status().message().find("use one of")));
    HARP_ASSIGN_OR_RETURN(node, std::move(doc));
    file = preset_or_file;
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
  if (m.family == "llama") {  // GPT's JSON (and so its fingerprints) stays as it was
    j["kv_heads"] = c.kv_heads;
    j["rope_theta"] = c.rope_theta;
  }
  return j;
}

}  // namespace harp::model
