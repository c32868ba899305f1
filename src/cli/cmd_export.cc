// `harp export --checkpoint DIR --plan PLAN [--step N] --format safetensors -o OUT`: a
// run's checkpoint as Hugging Face GPT-2 or LLaMA weights (OUT/model.safetensors, OUT/config.json;
// runtime/hf_weights.h), whatever plan layout it was trained with: checkpoints hold
// global parameter names.
#include <filesystem>

#include "commands.h"
#include "run_checkpoint.h"
#include "validators.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/io/checkpoint.h"
#include "harp/runtime/io/hf_weights.h"

namespace harp::cli {

StatusOr<RunCheckpoint> read_run_checkpoint(const std::string& checkpoint, const std::string& plan_file,
                                            const std::string& model, int step) {
  std::error_code ec;
  // The run folder (OUT, holding checkpoints/) or the checkpoints folder itself.
  const std::string dir =
      std::filesystem::is_directory(checkpoint + "/checkpoints", ec) ? checkpoint + "/checkpoints" : checkpoint;
  HARP_ASSIGN_OR_RETURN(plan::Plan p, plan::load_plan(plan_file));
  RunCheckpoint run;
  auto m = plan_model(p, plan_file, model, 0);
  if (!m.ok() && m.status().message().empty())
    return invalid_argument(plan_file + ": the plan names no model; pass --model PRESET|FILE");
  if (!m.ok()) return m.status();
  run.model = *m;
  run.step = step;
  if (run.step == 0) {
    HARP_ASSIGN_OR_RETURN(run.step, runtime::latest_checkpoint_step(dir));
  }
  long long optimizer_steps = 0;
  HARP_ASSIGN_OR_RETURN(run.tensors, runtime::read_checkpoint(dir, run.step, &optimizer_steps));
  return run;
}

namespace {

struct Opts {
  std::string checkpoint, plan_file, model, format = "safetensors", output;
  int step = 0;  // 0: the latest
};

int run_export(const Opts& o, Context& ctx) {
  auto run = read_run_checkpoint(o.checkpoint, o.plan_file, o.model, o.step);
  if (!run.ok()) return ctx.fail("export", run.status());
  Status s = runtime::export_hf(run->model, run->tensors, o.output);
  if (!s.ok()) return ctx.fail("export", s);
  ctx.out << "wrote " << o.output << "/model.safetensors and config.json ("
          << runtime::hf_config(run->model)["architectures"][0].get<std::string>() << ", " << run->model.gpt.name
          << ", step " << run->step << ")\n";
  return kExitOk;
}

}  // namespace

void add_export_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("export", "Write a checkpoint as Hugging Face safetensors");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--checkpoint", o->checkpoint, "A run's folder (--out of harp train) or its checkpoints/")
      ->required();
  cmd->add_option("--plan", o->plan_file, "The plan the run trained (its model)")->required();
  cmd->add_option("--model", o->model, "Model preset or file (default: the plan's)");
  cmd->add_option("--step", o->step, "Checkpoint step (default: the latest)")->check(whole(1));
  cmd->add_option("--format", o->format, "safetensors (Hugging Face GPT-2 or LLaMA names and config.json)")
      ->check(CLI::IsMember({"safetensors"}));
  cmd->add_option("-o,--output", o->output, "Folder to write model.safetensors and config.json into")->required();
  cmd->callback([o, &ctx] { ctx.rc = run_export(*o, ctx); });
}

}  // namespace harp::cli
