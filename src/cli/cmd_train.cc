// `harp train --plan PLAN.json`: one rank of a training run (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT as torchrun sets them; `harp launch` starts several locally).
// Built only with libtorch.
#include <cstdlib>
#include <thread>

#include "commands.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/comm.h"
#include "harp/runtime/trainer.h"
#include "table.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string plan_file, model = "", data = "synthetic", out = "out/train", dtype = "float32";
  int granularity = 0, steps = 10, checkpoint_every = 0, threads = 1, warmup_steps = 10;
  double lr = 3e-4, timeout_s = 60, grad_clip = 1.0;
  std::uint64_t seed = 1234;
  bool resume = false, emulate = false, quiet = false;
  std::vector<int> trace_steps;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

int run_train(const Opts& o, Context& ctx) {
  auto p = plan::load_plan(o.plan_file);
  if (!p.ok()) return ctx.fail("train", p.status());
  // The model: the spec the plan was made for (its model_config), unless --model names
  // another; the granularity: --granularity, else the plan's, else the model's own.
  StatusOr<model::ModelSpec> m = invalid_argument("no model");
  if (o.model.empty() && !p->model_config.is_null()) {
    Json config = p->model_config;
    if (o.granularity > 0) config["granularity"] = o.granularity;
    m = model::parse_model(config, o.plan_file, "model_config");
  } else {
    const std::string model_name = o.model.empty() ? p->model_name : o.model;
    if (model_name.empty()) {
      ctx.err << "harp train: the plan names no model; pass --model PRESET|FILE\n";
      return ctx.rc = kExitUsage;
    }
    // 0: the model file's (or preset's) own granularity; a mismatch with the plan's layer
    // ranges is reported by check_plan_matches_model.
    m = model::load_model(model_name, o.granularity > 0 ? o.granularity : p->granularity);
  }
  if (!m.ok()) return ctx.fail("train", m.status());
  Status fits = runtime::check_plan_matches_model(*p, *m);
  if (!fits.ok()) return ctx.fail("train", fits);
  const int world = env_int("WORLD_SIZE", 1), rank = env_int("RANK", 0);
  auto layout = runtime::layout_for(*p, world, rank);
  if (!layout.ok()) return ctx.fail("train", layout.status());

  std::unique_ptr<runtime::TokenSource> data;
  if (o.data == "synthetic") {
    data = runtime::synthetic_tokens(o.seed, 1 << 20, m->gpt.vocab);
  } else {
    auto d = runtime::open_token_file(o.data);
    if (!d.ok()) return ctx.fail("train", d.status());
    data = std::move(*d);
    if (data->vocab_limit() > m->gpt.vocab) {
      ctx.err << "harp train: " << o.data << " has token ids up to " << data->vocab_limit() - 1
              << " but the model's vocabulary is " << m->gpt.vocab << "; use a model with vocab >= "
              << data->vocab_limit() << "\n";
      return ctx.rc = kExitInput;
    }
  }

  runtime::set_compute_threads(o.threads);
  runtime::TrainOptions t;
  t.exec.seed = o.seed;
  t.exec.dtype = o.dtype == "float64" ? torch::kFloat64 : torch::kFloat32;
  t.exec.optim.lr = o.lr;
  t.exec.optim.min_lr = o.lr / 10;
  t.exec.optim.warmup_steps = o.warmup_steps;
  t.exec.optim.decay_steps = std::max(o.steps, o.warmup_steps + 1);
  t.exec.optim.grad_clip = o.grad_clip;
  t.exec.emulate = o.emulate || env_int("HARP_EMULATE", 0) != 0;
  t.steps = o.steps;
  t.out_dir = o.out;
  t.checkpoint_every = o.checkpoint_every;
  t.resume = o.resume;
  t.trace_steps = o.trace_steps;
  t.progress = !o.quiet;
  // Fault injection for the failure tests (docs/runtime.md): die or hang at a step.
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000));
  try {
    auto comm = runtime::C10dTransport::create(runtime::tcp_store_from_env(rank, world, timeout), *layout, timeout,
                                      m->gpt.tied_embeddings);
    if (rank == 0 && !o.quiet)
      ctx.out << "training " << m->gpt.name << " (k = " << m->gpt.granularity << ", " << m->num_layers() << " layers) on "
              << world << " ranks, " << p->num_stages() << " stages, schedule "
              << plan::schedule_kind_name(p->schedule) << ", B = " << p->microbatches << " x "
              << p->microbatch_size << (t.exec.emulate ? ", emulating slower devices" : "") << "\n";
    auto summary = runtime::train(*m, *p, *comm, *data, t, ctx.out);
    if (!summary.ok()) return ctx.fail("train", summary.status());
    if (rank == 0 && !o.quiet)
      ctx.out << "done: " << summary->losses.size() << " steps, mean " << fmt_time(summary->mean_iteration_s)
              << "/step, " << fmt("%.0f", summary->tokens_per_s) << " tokens/s; metrics in " << o.out
              << "/metrics.jsonl\n";
  } catch (const runtime::RuntimeFailure& e) {
    ctx.err << "harp train: " << e.what() << "\n";
    return ctx.rc = kExitInput;
  } catch (const std::exception& e) {
    ctx.err << "harp train: rank " << rank << ": " << e.what() << "\n";
    return ctx.rc = kExitInput;
  }
  return kExitOk;
}

}  // namespace

void add_train_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("train", "Train with a plan (one rank; see harp launch)");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--plan", o->plan_file, "Plan file (JSON) from harp plan")->required();
  cmd->add_option("--model", o->model, "Model preset or file (default: the plan's model)");
  cmd->add_option("--granularity", o->granularity, "Sub-layers per block (default: from the plan)")
      ->check(CLI::Range(1, 4));
  cmd->add_option("--data", o->data, "Token file (.bin) or `synthetic`")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Training steps")->check(CLI::Range(1, 1 << 30))->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of weights and data")->capture_default_str();
  cmd->add_option("--lr", o->lr, "Peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup-steps", o->warmup_steps, "Linear warm-up steps")->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--grad-clip", o->grad_clip, "Max global gradient norm (0: off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", o->dtype, "float32 or float64")->check(CLI::IsMember({"float32", "float64"}));
  cmd->add_option("--out", o->out, "Output folder: metrics, traces, checkpoints")->capture_default_str();
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "Checkpoint every K steps (0: never)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--resume", o->resume, "Continue from the last checkpoint in --out");
  cmd->add_option("--trace-steps", o->trace_steps, "Steps whose measured timeline is written, e.g. 3,4")
      ->delimiter(',');
  cmd->add_option("--timeout-s", o->timeout_s, "Give up on a peer after this long")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "Intra-op threads per rank")->check(CLI::Range(1, 256));
  cmd->add_flag("--emulate", o->emulate, "Apply the plan's emulated device slowdowns");
  cmd->add_flag("--quiet", o->quiet, "No progress lines");
  cmd->callback([o, &ctx] { ctx.rc = run_train(*o, ctx); });
}

}  // namespace harp::cli
