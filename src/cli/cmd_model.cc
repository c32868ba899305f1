// `harp model show FILE|PRESET`: the fine-grained layer sequence.
#include "commands.h"
#include "validators.h"
#include "harp/model/model_spec.h"
#include "harp/common/table.h"

namespace harp::cli {
namespace {

int run_model_show(const std::string& what, int granularity, Context& ctx) {
  auto m = model::load_model(what, granularity);
  if (!m.ok()) return ctx.fail("model show", m.status());
  const auto& c = m->gpt;
  const bool llama = m->family == "llama";
  // The family, then every part that differs from it (what a config.json set).
  std::string parts;
  if (c.head_dim > 0) parts += ", head_dim " + std::to_string(c.head_dim);
  if (c.qkv_bias) parts += ", q/k/v biases";
  if (c.qk_norm) parts += ", q/k RMSNorm per head";
  if (c.sliding_window > 0) parts += ", sliding window " + std::to_string(c.sliding_window);
  if (llama) parts += fmt(", rope theta %g", c.rope_theta);
  if (!c.rope_scaling.type.empty())
    parts += fmt(" scaled %s (factor %g, low %g, high %g, original %d)", c.rope_scaling.type.c_str(),
                 c.rope_scaling.factor, c.rope_scaling.low_freq_factor, c.rope_scaling.high_freq_factor,
                 c.rope_scaling.original_max_position_embeddings);
  if (c.norm_eps != model::GptConfig().norm_eps) parts += fmt(", norm eps %g", c.norm_eps);
  ctx.out << "model " << c.name << ": " << (c.architecture.empty() ? (llama ? "LLaMA" : "GPT") : c.architecture) << ", "
          << c.num_blocks << " blocks, hidden " << c.hidden << ", " << c.heads << " heads"
          << (llama && c.kv_heads != c.heads ? " (" + std::to_string(c.kv_heads) + " key/value)" : std::string())
          << ", seq " << c.seq_len << ", vocab " << c.vocab << ", ffn " << c.ffn_hidden
          << (llama ? " (SwiGLU), RMSNorm, rotary" : "") << (c.tied_embeddings ? "" : ", untied embeddings") << parts
          << "\n";
  ctx.out << "granularity k = " << c.granularity << ": L = 2 + " << c.num_blocks << " x "
          << c.granularity << " = " << m->num_layers() << " layers; "
          << fmt("%.3f", m->param_count() / 1e9) << " B parameters; "
          << fmt("%.2f", m->fwd_flops_per_sample() / 1e12) << " TFLOP forward per sample\n\n";
  Table t({"#", "layer", "signature", "fwd GFLOP", "params", "act/sample", "out/sample"});
  for (int i = 0; i < m->num_layers(); ++i) {
    const auto& l = m->layers[i];
    t.add({std::to_string(i), l.name, l.signature.substr(0, 8), fmt("%.2f", l.fwd_flops / 1e9),
           fmt("%.2f M", l.param_count / 1e6), fmt_bytes(l.activation_bytes), fmt_bytes(l.output_bytes)});
  }
  t.print(ctx.out);
  ctx.out << "\nper-sample figures; a microbatch of b samples multiplies them by b. Layers with "
             "the same signature are profiled once.\n";
  return kExitOk;
}

}  // namespace

StatusOr<model::ModelSpec> plan_model(const plan::Plan& p, const std::string& plan_file, const std::string& model,
                                      int granularity) {
  if (model.empty() && !p.model_config.is_null()) {
    Json config = p.model_config;
    if (granularity > 0) config["granularity"] = granularity;
    return model::parse_model(config, plan_file, "model_config");
  }
  const std::string name = model.empty() ? p.model_name : model;
  if (name.empty()) return invalid_argument("");
  // 0: the model file's (or preset's) own granularity; a mismatch with the plan's layer
  // ranges is reported by runtime::check_plan_matches_model.
  return model::load_model(name, granularity > 0 ? granularity : p.granularity);
}

void add_model_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("model", "Inspect a model spec");
  cmd->require_subcommand(1, 1);
  auto* show = cmd->add_subcommand("show", "Print a model's fine-grained layer sequence");
  struct Opts {
    std::string what;
    int granularity = 0;
  };
  auto o = std::make_shared<Opts>();
  show->add_option("model", o->what, "Model file or preset (gpt-tiny, gpt-125m ... gpt-76b)")->required();
  show->add_option("--granularity", o->granularity, "Sub-layers per block, 1-4 (default: the file's, or 1)")
      ->check(whole(1, 4));
  show->callback([o, &ctx] { ctx.rc = run_model_show(o->what, o->granularity, ctx); });
}

}  // namespace harp::cli
