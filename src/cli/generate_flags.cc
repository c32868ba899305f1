#include "generate_flags.h"

#include "validators.h"

namespace harp::cli {

void add_generate_flags(CLI::App* cmd, GenerateFlags& f) {
  cmd->add_option("--checkpoint", f.checkpoint, "A run's folder (--out of harp train) or its checkpoints/");
  cmd->add_option("--plan", f.plan_file, "The plan the run trained (its model), with --checkpoint");
  cmd->add_option("--model", f.model, "Model preset or file (default: the plan's), with --checkpoint");
  cmd->add_option("--step", f.step, "Checkpoint step (default: the latest)")->check(whole(1));
  cmd->add_option("--hf", f.hf, "A Hugging Face GPT-2 or LLaMA folder (config.json, model.safetensors)");
  cmd->add_option("--max-new-tokens", f.max_new_tokens, "Tokens to generate (default 128)")->check(whole(1, 1 << 20));
  cmd->add_option("--temperature", f.temperature, "Softmax temperature; 0: greedy (default 1)")->check(real(0, 100));
  cmd->add_option("--top-k", f.top_k, "Draw among the k most likely tokens; 0: all (default)")->check(whole(0));
  cmd->add_option("--top-p", f.top_p, "Draw among the most likely tokens holding probability p; 1: all (default)")
      ->check(real(0, 1, /*lo_open=*/true));
  cmd->add_option("--seed", f.seed, "Sampling seed: the same seed, the same text (default 1)")
      ->check(whole(0, std::numeric_limits<std::int64_t>::max()));
  cmd->add_option("--dtype", f.dtype, "float32 (default) or float64")
      ->check(CLI::IsMember({"float32", "float64"}));
  cmd->add_option("--device", f.device, "cpu (default) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--threads", f.threads, "CPU compute threads (default: every core)")->check(whole(1, 4096));
  cmd->add_flag("--no-cache", f.no_cache, "Run the whole context through the model at every token (no KV cache)");
}

std::vector<std::string> generate_flag_args(const GenerateFlags& f) {
  std::vector<std::string> a;
  auto add = [&a](const char* flag, const std::string& value) {
    if (!value.empty()) a.insert(a.end(), {flag, value});
  };
  add("--checkpoint", f.checkpoint);
  add("--plan", f.plan_file);
  add("--model", f.model);
  if (f.step > 0) add("--step", std::to_string(f.step));
  add("--hf", f.hf);
  add("--max-new-tokens", std::to_string(f.max_new_tokens));
  // %.17g: the value the child parses is the one parsed here.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", f.temperature);
  add("--temperature", buf);
  std::snprintf(buf, sizeof buf, "%.17g", f.top_p);
  add("--top-p", buf);
  add("--top-k", std::to_string(f.top_k));
  add("--seed", std::to_string(f.seed));
  add("--dtype", f.dtype);
  add("--device", f.device);
  if (f.threads > 0) add("--threads", std::to_string(f.threads));
  if (f.no_cache) a.push_back("--no-cache");
  return a;
}

std::string generate_source_error(const GenerateFlags& f) {
  if (!f.hf.empty() && (!f.checkpoint.empty() || !f.plan_file.empty()))
    return "give either --hf DIR or --checkpoint DIR --plan PLAN, not both";
  if (f.hf.empty() && f.checkpoint.empty())
    return "no model: give --hf DIR (Hugging Face folder) or --checkpoint DIR --plan PLAN (a run's checkpoint)";
  if (!f.checkpoint.empty() && f.plan_file.empty())
    return "--checkpoint needs --plan PLAN, the plan the run trained (it names the model)";
  return "";
}

}  // namespace harp::cli
