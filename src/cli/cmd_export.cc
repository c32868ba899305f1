// `harp export --checkpoint DIR --plan PLAN [--step N] --format safetensors -o OUT`: a
// run's checkpoint as Hugging Face GPT-2 or LLaMA weights (OUT/model.safetensors, OUT/config.json;
// runtime/hf_weights.h), whatever plan layout it was trained with: checkpoints hold
// global parameter names.
// `harp export --plan PLAN --to pytorch-pipelining -o DIR [--schedule KIND]`: the plan for
// PyTorch's pipeline runtime (export_pytorch.h); with --checkpoint, the weights as well
// (DIR/weights/).
#include <filesystem>
#include <sstream>

#include "commands.h"
#include "export_pytorch.h"
#include "harp/common/output_folder.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/io/checkpoint.h"
#include "harp/runtime/io/hf_weights.h"
#include "run_checkpoint.h"
#include "validators.h"

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
  std::string checkpoint, plan_file, model, format = "safetensors", output, to, schedule;
  int step = 0;  // 0: the latest
  double max_shard_gb = 5;  // save_pretrained's default
};

// The names an export of Hugging Face weights writes: an earlier export's files of these
// kinds are replaced, whatever else the folder holds is kept (common/output_folder.h).
bool hf_owned(const std::string& name) {
  const bool shard =
      name.rfind("model-", 0) == 0 && name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
  return name == "config.json" || name == "model.safetensors" || name == "model.safetensors.index.json" || shard;
}

// The checkpoint's weights as Hugging Face files in `dir` (a staging folder); `shown`
// is the folder the user named. The line saying what it wrote goes to `report`, printed once
// the folder is in place.
int export_weights(const Opts& o, const std::string& dir, const std::string& shown, Context& ctx,
                   std::ostream& report) {
  auto run = read_run_checkpoint(o.checkpoint, o.plan_file, o.model, o.step);
  if (!run.ok()) return ctx.fail("export", run.status());
  Status s = runtime::export_hf(run->model, run->tensors, dir, static_cast<std::int64_t>(o.max_shard_gb * 1e9));
  if (!s.ok()) return ctx.fail("export", s);
  std::error_code ec;
  const bool sharded = std::filesystem::exists(dir + "/model.safetensors.index.json", ec);
  report << "wrote " << shown << (sharded ? "/model-*.safetensors, model.safetensors.index.json" : "/model.safetensors")
         << " and config.json (" << runtime::hf_config(run->model)["architectures"][0].get<std::string>() << ", "
         << run->model.gpt.name << ", step " << run->step << ")\n";
  return kExitOk;
}

int export_plan(const Opts& o, Context& ctx) {
  auto p = plan::load_plan(o.plan_file);
  if (!p.ok()) return ctx.fail("export", p.status());
  // As harp train --schedule runs it: the plan under another schedule kind.
  if (!o.schedule.empty() && !plan::parse_schedule_kind(o.schedule, &p->schedule)) {
    ctx.err << "harp export: --schedule " << o.schedule.substr(0, 40)
            << ": unknown; use gpipe, 1f1b, harp-1f1b, zb-h1, zb-h2 or harp-zb\n";
    return kExitUsage;
  }
  auto m = plan_model(*p, o.plan_file, o.model, 0);
  if (!m.ok() && m.status().message().empty()) {
    ctx.err << "harp export: " << o.plan_file << ": the plan names no model; pass --model PRESET|FILE\n";
    return kExitUsage;
  }
  if (!m.ok()) return ctx.fail("export", m.status());
  // Written whole or not at all: an earlier export in the folder is replaced only once this
  // one is complete (its weights/ too, when this one has none: they were another plan's).
  auto folder = OutputFolder::begin(o.output, [](const std::string& name) {
    return name == "manifest.json" || name == "schedule.csv" || name == "schedule_compute_only.csv" ||
           name == "weights";
  });
  if (!folder.ok()) return ctx.fail("export", folder.status());
  std::ostringstream report;
  if (!o.checkpoint.empty())
    if (const int rc = export_weights(o, folder->path() + "/weights", o.output + "/weights", ctx, report);
        rc != kExitOk)
      return rc;
  if (Status s = export_pytorch_pipelining(*p, o.plan_file, *m, folder->path(), o.output, report); !s.ok())
    return ctx.fail("export", s);
  if (Status s = folder->commit(); !s.ok()) return ctx.fail("export", s);
  ctx.out << report.str();
  return kExitOk;
}

int run_export(const Opts& o, Context& ctx) {
  if (!o.to.empty()) return export_plan(o, ctx);
  if (o.checkpoint.empty()) {
    ctx.err << "harp export: --checkpoint is required (or --to pytorch-pipelining to export the plan)\n";
    return kExitUsage;
  }
  if (!o.schedule.empty()) {
    ctx.err << "harp export: --schedule applies to --to pytorch-pipelining only\n";
    return kExitUsage;
  }
  auto folder = OutputFolder::begin(o.output, hf_owned);
  if (!folder.ok()) return ctx.fail("export", folder.status());
  std::ostringstream report;
  if (const int rc = export_weights(o, folder->path(), o.output, ctx, report); rc != kExitOk) return rc;
  if (Status s = folder->commit(); !s.ok()) return ctx.fail("export", s);
  ctx.out << report.str();
  return kExitOk;
}

}  // namespace

void add_export_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand(
      "export", "Write a checkpoint as Hugging Face safetensors, or a plan for PyTorch's pipeline runtime");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--checkpoint", o->checkpoint,
                  "A run's folder (--out of harp train) or its checkpoints/ (required without --to)");
  cmd->add_option("--plan", o->plan_file, "The plan the run trained (its model), or the plan to export")->required();
  cmd->add_option("--to", o->to,
                  "pytorch-pipelining: the plan's per-stage action lists as PyTorch pipelining's schedule CSV, "
                  "with a manifest of layers and ranks (docs/pytorch.md)")
      ->check(CLI::IsMember({"pytorch-pipelining"}));
  cmd->add_option("--schedule", o->schedule,
                  "With --to: export the plan under another schedule (as harp train --schedule runs it)");
  cmd->add_option("--model", o->model, "Model preset or file (default: the plan's)");
  cmd->add_option("--step", o->step, "Checkpoint step (default: the latest)")->check(whole(1));
  cmd->add_option("--max-shard-gb", o->max_shard_gb,
                  "Largest weight file in GB (10^9 bytes); larger models are sharded with an index, as "
                  "save_pretrained does")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--format", o->format, "safetensors (Hugging Face GPT-2 or LLaMA names and config.json)")
      ->check(CLI::IsMember({"safetensors"}));
  cmd->add_option("-o,--output", o->output,
                  "Folder to write model.safetensors and config.json into (with --to: the export; weights/ "
                  "holds the checkpoint's when --checkpoint is given)")
      ->required();
  cmd->callback([o, &ctx] { ctx.rc = run_export(*o, ctx); });
}

}  // namespace harp::cli
