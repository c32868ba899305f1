// `harp train --plan PLAN.json`: one rank of a training run (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT as torchrun sets them; `harp launch` starts several locally).
// Built only with libtorch.
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>

#include "commands.h"
#include "validators.h"
#include "validators.h"
#include "harp/job/job.h"
#include "harp/launch/worker_env.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/comm/transport.h"
#include "harp/runtime/training_run.h"

namespace harp::cli {
namespace {

// The flags: the plan, the model, a job whose training section is the base config, and
// one override per training field (applied only when given on the command line).
struct Opts {
  std::string plan_file, model, job_file;
  std::string schedule;  // overrides the plan's, as harp simulate --schedule does
  int granularity = 0;
  bool resume = false, quiet = false;
  config::TrainConfig flags;  // values of the override flags
  std::vector<CLI::Option*> overrides;  // the override flags, to see which were given
  std::vector<std::function<void(config::TrainConfig&)>> apply;  // same order
};

// The job's training section (or the defaults; checked with the job), then every flag
// the user gave. A combination the flags made invalid is the command line's error (exit
// 2, `*usage`), not the job file's.
StatusOr<config::TrainConfig> resolve_config(const Opts& o, bool* usage) {
  config::TrainConfig c;
  if (!o.job_file.empty()) {
    HARP_ASSIGN_OR_RETURN(job::Job job, job::load_job(o.job_file));
    c = job.training;
  }
  for (size_t i = 0; i < o.overrides.size(); ++i)
    if (o.overrides[i]->count() > 0) o.apply[i](c);
  if (o.quiet) c.progress = false;
  Status s = c.validate(o.job_file.empty() ? "the command line" : o.job_file + " with the command line's flags");
  *usage = !s.ok();
  HARP_RETURN_IF_ERROR(s);
  return c;
}

// SIGUSR1: stop after the next checkpoint (harp launch passes it on; elastic training
// re-plans then, e.g. to re-admit devices). It is blocked first thing, before any other
// thread exists (threads inherit the mask), and one thread takes it with sigwait: a
// handler would run on whichever thread the kernel picks and interrupt its system call,
// and a SIGUSR1 that interrupted a Gloo or OpenMP thread mid-step corrupted the heap
// (about 1 run in 4 under load, `Elastic.SignalReadmitsTheDevicesOfTheClusterFile`).
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
void on_stop_request(int) { g_stop_requested = true; }  // a thread started before the block
void take_stop_requests_on_one_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::signal(SIGUSR1, on_stop_request);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
    std::thread([usr1] {
      for (;;) {
        int sig = 0;
        if (sigwait(&usr1, &sig) == 0 && sig == SIGUSR1) g_stop_requested = true;
      }
    }).detach();
  });
}

int run_train(const Opts& o, Context& ctx) {
  g_stop_requested = false;
  take_stop_requests_on_one_thread();
  runtime::RunRequest r;
  bool usage = false;
  auto config = resolve_config(o, &usage);
  if (!config.ok()) {
    ctx.fail("train", config.status());
    return ctx.rc = usage ? kExitUsage : ctx.rc;
  }
  r.config = *config;
  auto p = plan::load_plan(o.plan_file);
  if (!p.ok()) return ctx.fail("train", p.status());
  r.planned_schedule = p->schedule;
  if (!o.schedule.empty() && !plan::parse_schedule_kind(o.schedule, &p->schedule)) {
    ctx.err << "harp train: --schedule " << o.schedule.substr(0, 40) << ": unknown; use gpipe, 1f1b, harp-1f1b, zb-h1, zb-h2 or harp-zb\n";
    return ctx.rc = kExitUsage;
  }
  StatusOr<model::ModelSpec> m = plan_model(*p, o.plan_file, o.model, o.granularity);
  if (!m.ok() && m.status().message().empty()) {
    ctx.err << "harp train: the plan names no model; pass --model PRESET|FILE\n";
    return ctx.rc = kExitUsage;
  }
  if (!m.ok()) return ctx.fail("train", m.status());
  r.plan = std::move(*p);
  r.plan_file = o.plan_file;
  r.model = std::move(*m);
  auto env = launch::WorkerEnv::from_env();
  if (!env.ok()) return ctx.fail("train", env.status());
  r.env = *env;
  r.resume = o.resume;
  r.stop_requested = [] { return g_stop_requested.load(); };
  const int rank = r.env.rank;
  try {
    auto run = runtime::TrainingRun::open(std::move(r), ctx.out);
    if (!run.ok()) return ctx.fail("train", run.status());
    if (Status s = (*run)->run(); !s.ok()) return ctx.fail("train", s);
  } catch (const runtime::RuntimeFailure& e) {
    return ctx.fail("train", e);
  } catch (const std::exception& e) {
    return ctx.fail(("train: rank " + std::to_string(rank)).c_str(), e);
  }
  return kExitOk;
}

}  // namespace

void add_train_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("train", "Train with a plan (one rank; see harp launch)");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--plan", o->plan_file, "Plan file (JSON) from harp plan")->required();
  cmd->add_option("--model", o->model, "Model preset or file (default: the plan's model)");
  cmd->add_option("--schedule", o->schedule, "Run the plan under another schedule: gpipe, 1f1b, harp-1f1b, zb-h1, zb-h2, harp-zb");
  cmd->add_option("--granularity", o->granularity, "Sub-layers per block (default: from the plan)")
      ->check(whole(1, 4));
  cmd->add_option("--job", o->job_file, "Job file whose training: section is the base configuration");
  // Overrides of the training section (docs/file_formats.md, "Job"): only the given ones
  // apply, each copying its field from the flag values into the resolved config.
  config::TrainConfig& f = o->flags;
  auto over = [&](CLI::Option* opt, auto config::TrainConfig::*field) {
    o->overrides.push_back(opt);
    o->apply.push_back([&f, field](config::TrainConfig& c) { c.*field = f.*field; });
  };
  using C = config::TrainConfig;
  // A setting named in its table (config/names.h): the flag takes the names alone (CLI11
  // checks them, and its help lists them) and is parsed into the field when given.
  auto named = [&](const char* flag, auto C::*field, const char* help) {
    auto text = std::make_shared<std::string>(config::name_of(f.*field));
    CLI::Option* opt = cmd->add_option(flag, *text, help)
                           ->check(CLI::IsMember(config::names_of<std::decay_t<decltype(f.*field)>>()))
                           ->capture_default_str();
    o->overrides.push_back(opt);
    o->apply.push_back([text, field](C& c) { config::parse_name(*text, &(c.*field)); });
  };
  over(cmd->add_option("--data", f.data, "Token file (.bin) or `synthetic`")->capture_default_str(), &C::data);
  over(cmd->add_option("--steps", f.steps, "Training steps")->capture_default_str()->check(whole(1, 1 << 30)), &C::steps);
  over(cmd->add_option("--seed", f.seed, "Seed of weights and data")
           ->capture_default_str()
           ->check(whole(0, std::numeric_limits<std::int64_t>::max())), &C::seed);
  over(cmd->add_option("--lr", f.lr, "Peak learning rate")->capture_default_str()->check(in_quantity(quantity::kLearningRate)), &C::lr);
  over(cmd->add_option("--warmup-steps", f.warmup_steps, "Linear warm-up steps")->capture_default_str()->check(whole(1, 1 << 30)),
       &C::warmup_steps);
  over(cmd->add_option("--grad-clip", f.grad_clip, "Max global gradient norm (0: off)")
           ->capture_default_str()
           ->check(in_quantity(quantity::kGradClip)),
       &C::grad_clip);
  named("--dtype", &C::dtype,
        "float32, float64, bfloat16 or float16 (the last two: float32 master weights; float16 on CUDA)");
  named("--device", &C::device, "auto (cuda:LOCAL_RANK when CUDA is there), cpu or cuda");
  named("--loss-scale", &C::loss_scale, "Dynamic loss scaling: auto (on for float16), dynamic or none");
  named("--grad-reduce-dtype", &C::grad_reduce_dtype,
        "dtype of the data-parallel gradient all-reduce: auto (the gradients'), float32, float16 or bfloat16 (NCCL "
        "only)");
  named("--zero", &C::zero,
        "Sharded optimizer state per stage: plan (as the plan says), 0, 1 (Adam's moments) or 2 (and the "
        "gradients), over each stage's data-parallel group");
  named("--recompute", &C::recompute,
        "Activation recomputation: plan (each stage as the plan says), none, selective or full");
  over(cmd->add_option("--out", f.out, "Output folder: metrics, traces, checkpoints")->capture_default_str(),
       &C::out);
  over(cmd->add_option("--checkpoint-every", f.checkpoint_every, "Checkpoint every K steps (0: never)")->check(whole(0, 1 << 30)),
       &C::checkpoint_every);
  over(cmd->add_option("--keep-checkpoints", f.keep_checkpoints, "Keep the newest K checkpoints (0: all)")->check(whole(0, 1 << 20)),
       &C::keep_checkpoints);
  over(cmd->add_option("--async-checkpoints", f.async_checkpoints,
                       "true: write checkpoints behind the next steps; false: before them")
           ->capture_default_str(),
       &C::async_checkpoints);
  cmd->add_flag("--resume", o->resume, "Continue from the last checkpoint in --out");
  over(cmd->add_option("--trace-steps", f.trace_steps, "Steps whose measured timeline is written, e.g. 3,4")
           ->delimiter(',')
           ->check(whole(0, 1 << 30)),
       &C::trace_steps);
  over(cmd->add_option("--timeout-s", f.timeout_s, "Give up on a peer after this long")
           ->capture_default_str()
           ->check(in_quantity(quantity::kTimeoutS)),
       &C::timeout_s);
  over(cmd->add_option("--threads", f.threads, "Intra-op threads per rank")->capture_default_str()->check(whole(1, 256)), &C::threads);
  over(cmd->add_flag("--emulate", f.emulate, "Apply the plan's emulated device slowdowns"), &C::emulate);
  over(cmd->add_option("--init-from", f.init_from,
                       "Hugging Face GPT-2 or LLaMA weights: a .safetensors file or a folder (model.safetensors or the "
                       "index and its shards)"),
       &C::init_from);
  over(cmd->add_option("--val-data", f.val_data, "Validation token file (harp data prepare --val-fraction)"),
       &C::val_data);
  over(cmd->add_option("--eval-every", f.eval_every, "Validation loss every K steps and after the last")
           ->capture_default_str()
           ->check(whole(1, 1 << 30)),
       &C::eval_every);
  over(cmd->add_option("--eval-batches", f.eval_batches, "Global batches per validation")
           ->capture_default_str()
           ->check(whole(1, 100000)),
       &C::eval_batches);
  over(cmd->add_option("--drift-threshold", f.drift_threshold,
                       "Report a stage whose compute leaves its baseline by more than this factor (0: off)")
           ->check(real(0, 100)),
       &C::drift_threshold);
  over(cmd->add_option("--link-probe-every", f.link_probe_every,
                       "Probe the links between pools the plan does not join every K steps (0: never)")
           ->check(whole(0, 1000000)),
       &C::link_probe_every);
  over(cmd->add_option("--drift-window", f.drift_window, "Steps whose median drift detection compares")
           ->capture_default_str()
           ->check(whole(1, 10000)),
       &C::drift_window);
  over(cmd->add_option("--sample-every", f.sample_every, "Print a sample from the model every K steps (0: never)")
           ->check(whole(0, 1 << 30)),
       &C::sample_every);
  over(cmd->add_option("--sample-prompt", f.sample_prompt, "The text samples continue (default: a newline)"),
       &C::sample_prompt);
  over(cmd->add_option("--sample-tokens", f.sample_tokens, "Tokens per sample")->capture_default_str()->check(whole(1, 4096)),
       &C::sample_tokens);
  over(cmd->add_option("--sample-tokenizer", f.sample_tokenizer,
                       "byte, or the GPT-2 BPE files the data was prepared with (vocab.json + merges.txt folder, "
                       "tokenizer.json)")
           ->capture_default_str(),
       &C::sample_tokenizer);
  cmd->add_flag("--quiet", o->quiet, "No progress lines");
  cmd->callback([o, &ctx] { ctx.rc = run_train(*o, ctx); });
}

}  // namespace harp::cli
