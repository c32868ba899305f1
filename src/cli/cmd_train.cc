// `harp train --plan PLAN.json`: one rank of a training run (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT as torchrun sets them; `harp launch` starts several locally).
// Built only with libtorch.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "commands.h"
#include <functional>

#include "harp/job/job.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/comm.h"
#include "harp/runtime/memory.h"
#include "harp/runtime/trainer.h"
#include "harp/schedule/generators.h"
#include "harp/sim/run.h"
#include "table.h"

namespace harp::cli {
namespace {

// The flags: the plan, the model, a job whose training section is the base config, and
// one override per training field (applied only when given on the command line).
struct Opts {
  std::string plan_file, model, job_file;
  std::string schedule;  // overrides the plan's, as harp simulate --schedule does
  int granularity = 0;
  bool resume = false, quiet = false;
  runtime::TrainConfig flags;  // values of the override flags
  std::vector<CLI::Option*> overrides;  // the override flags, to see which were given
  std::vector<std::function<void(runtime::TrainConfig&)>> apply;  // same order
};

// The job's training section (or the defaults), then every flag the user gave.
StatusOr<runtime::TrainConfig> resolve_config(const Opts& o) {
  runtime::TrainConfig c;
  if (!o.job_file.empty()) {
    HARP_ASSIGN_OR_RETURN(job::Job job, job::load_job(o.job_file));
    c = job.training;
  }
  for (size_t i = 0; i < o.overrides.size(); ++i)
    if (o.overrides[i]->count() > 0) o.apply[i](c);
  if (o.quiet) c.progress = false;
  HARP_RETURN_IF_ERROR(c.validate(o.job_file.empty() ? "the command line" : o.job_file + " and the command line"));
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

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

int run_train(const Opts& o, Context& ctx) {
  g_stop_requested = false;
  take_stop_requests_on_one_thread();
  auto config = resolve_config(o);
  if (!config.ok()) return ctx.fail("train", config.status());
  const runtime::TrainConfig& c = *config;
  auto p = plan::load_plan(o.plan_file);
  if (!p.ok()) return ctx.fail("train", p.status());
  const plan::ScheduleKind planned_schedule = p->schedule;
  if (!o.schedule.empty() && !plan::parse_schedule_kind(o.schedule, &p->schedule)) {
    ctx.err << "harp train: --schedule " << o.schedule.substr(0, 40) << ": unknown; use gpipe, 1f1b or harp-1f1b\n";
    return ctx.rc = kExitUsage;
  }
  StatusOr<model::ModelSpec> m = plan_model(*p, o.plan_file, o.model, o.granularity);
  if (!m.ok() && m.status().message().empty()) {
    ctx.err << "harp train: the plan names no model; pass --model PRESET|FILE\n";
    return ctx.rc = kExitUsage;
  }
  if (!m.ok()) return ctx.fail("train", m.status());
  Status fits = runtime::check_plan_matches_model(*p, *m);
  if (!fits.ok()) return ctx.fail("train", fits);
  const int world = env_int("WORLD_SIZE", 1), rank = env_int("RANK", 0);
  auto layout = runtime::layout_for(*p, world, rank);
  if (!layout.ok()) return ctx.fail("train", layout.status());

  std::unique_ptr<runtime::TokenSource> data;
  if (c.data == "synthetic") {
    if (m->gpt.vocab > 65536) {
      ctx.err << "harp train: synthetic tokens are uint16 but the model's vocabulary is " << m->gpt.vocab
              << "; use a token file, or a model with vocab <= 65536\n";
      return ctx.rc = kExitInput;
    }
    data = runtime::synthetic_tokens(c.seed, 1 << 20, m->gpt.vocab);
  }
  // A token file the model can read: ids below its vocabulary, at least one sample long.
  auto open_tokens = [&](const std::string& path, std::unique_ptr<runtime::TokenSource>* out) {
    auto d = runtime::open_token_file(path);
    if (!d.ok()) return ctx.fail("train", d.status());
    *out = std::move(*d);
    if ((*out)->vocab_limit() > m->gpt.vocab) {
      ctx.err << "harp train: " << path << " has token ids up to " << (*out)->vocab_limit() - 1
              << " but the model's vocabulary is " << m->gpt.vocab << "; use a model with vocab >= "
              << (*out)->vocab_limit() << "\n";
      return ctx.rc = kExitInput;
    }
    if ((*out)->size() < static_cast<std::int64_t>(m->gpt.seq_len) + 2) {
      ctx.err << "harp train: " << path << " holds " << (*out)->size() << " tokens, fewer than one sample of "
              << m->gpt.seq_len << " + 2; use a longer token file (harp data prepare) or a shorter seq_len\n";
      return ctx.rc = kExitInput;
    }
    return kExitOk;
  };
  if (c.data != "synthetic" && open_tokens(c.data, &data) != kExitOk) return ctx.rc;
  std::unique_ptr<runtime::TokenSource> val_data;
  if (!c.val_data.empty() && open_tokens(c.val_data, &val_data) != kExitOk) return ctx.rc;

  // The rank's device: cuda:LOCAL_RANK, as torchrun's ranks take theirs; CUDA ranks
  // exchange tensors over NCCL.
  auto device = runtime::resolve_device(c.device, env_int("LOCAL_RANK", 0));
  if (!device.ok()) return ctx.fail("train", device.status());
  if (Status s = runtime::check_dtype_on_device(c.dtype, *device); !s.ok()) return ctx.fail("train", s);
  if (device->is_cpu() && c.grad_reduce_dtype == "bfloat16") {
    ctx.err << "harp train: grad_reduce_dtype bfloat16 needs NCCL, and this rank runs on the CPU (Gloo cannot "
               "all-reduce bfloat16); use float16 or float32\n";
    return ctx.rc = kExitInput;
  }
  if (device->is_cuda() && !runtime::C10dTransport::nccl_available()) {
    ctx.err << "harp train: this build has no NCCL (its libtorch lacks USE_C10D_NCCL); use --device cpu, or build "
               "against a CUDA libtorch (docs/runtime.md, \"GPUs\")\n";
    return ctx.rc = kExitInput;
  }
  if (device->is_cuda()) runtime::set_current_device(*device);
  runtime::retain_freed_memory();
  runtime::set_compute_threads(c.threads, runtime::torch_dtype(c.dtype));
  // One rank per process: its tensor memory is the process's (summary.json "memory").
  runtime::install_counting_allocator();
  runtime::TrainOptions t = runtime::train_options(c);
  t.exec.device = *device;
  t.measure_memory = device->is_cpu();  // the counting allocator sees the CPU's tensors only
  t.resume = o.resume;
  t.val_data = val_data.get();
  t.stop_requested = [] { return g_stop_requested.load(); };
  t.exec.emulate = c.emulate || env_int("HARP_EMULATE", 0) != 0;  // harp launch --emulate
  if (const char* origin = std::getenv("HARP_CLOCK_ORIGIN_NS")) {  // harp launch: one clock for all ranks
    char* end = nullptr;
    const long long ns = std::strtoll(origin, &end, 10);
    if (end != origin && *end == '\0' && ns > 0) t.exec.clock_origin_ns = ns;
  }
  const char* testbed = std::getenv("HARP_TESTBED");
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(c.timeout_s * 1000));
  std::unique_ptr<runtime::RunDirLock> lock;
  if (rank == 0) {
    auto taken = runtime::RunDirLock::take(c.out);
    if (!taken.ok()) return ctx.fail("train", taken.status());
    lock = std::move(*taken);
  }
  try {
    auto comm = runtime::C10dTransport::create(runtime::store_from_env(rank, world, timeout), *layout, timeout,
                                               m->gpt.tied_embeddings, *device);
    if (rank == 0 && c.progress)
      ctx.out << "training " << m->gpt.name << " (k = " << m->gpt.granularity << ", " << m->num_layers() << " layers) on "
              << world << " ranks, " << p->num_stages() << " stages, schedule "
              << plan::schedule_kind_name(p->schedule) << ", B = " << p->microbatches << " x "
              << p->microbatch_size << (device->is_cuda() ? ", on CUDA (NCCL)" : "")
              << (t.exec.emulate ? ", emulating slower devices" : "")
              << (testbed != nullptr ? std::string(", links shaped by testbed ") + testbed : std::string()) << "\n";
    auto summary = runtime::train(*m, *p, *comm, *data, t, ctx.out);
    if (!summary.ok()) return ctx.fail("train", summary.status());
    if (rank == 0) {
      if (c.progress)
        ctx.out << "done: " << summary->losses.size() << " steps, median " << fmt_time(summary->median_iteration_s)
                << "/step (mean " << fmt_time(summary->mean_iteration_s) << "), " << fmt("%.0f", summary->tokens_per_s)
                << " tokens/s; metrics in " << c.out << "/metrics.jsonl\n";
      // The plan's own claim beside the measurement: the simulated iteration of its
      // schedule (what `harp simulate` predicts), the closed form beside it.
      double predicted = p->predicted.iteration_s;
      const double closed_form = predicted;
      sim::SimOptions so;
      so.record_spans = false;
      auto simulated = sim::simulate_plan(*p, p->schedule, so);
      if (simulated.ok()) predicted = simulated->result.iteration_s();
      const double measured = summary->median_iteration_s;
      const bool emulated_stages = std::any_of(p->stages.begin(), p->stages.end(),
                                               [](const plan::Stage& s) { return s.emulated_slowdown > 1.0; });
      const double error = predicted > 0 && measured > 0 ? (predicted - measured) / measured : 0.0;
      if (c.progress && predicted > 0 && measured > 0)
        ctx.out << "predicted " << fmt_time(predicted) << "/step by the plan (simulated"
                << (p->schedule == planned_schedule ? "; closed form " + fmt_time(closed_form)
                                                    : std::string(" under ") + plan::schedule_kind_name(p->schedule) +
                                                          ", not the planned " +
                                                          plan::schedule_kind_name(planned_schedule))
                << "; costs: "
                << (p->cost_source.empty() ? "unknown" : p->cost_source.substr(0, 60))
                << (p->cost_source.size() > 60 ? "..." : "") << "), measured " << fmt_time(measured)
                << fmt(": error %+.1f%%", 100 * error)
                << (emulated_stages && !t.exec.emulate ? " (the plan's emulated devices were not emulated: --emulate)"
                                                       : "")
                << "\n";
      // The same figures for scripts (make demo's table, bench/): OUT/summary.json.
      Json s;
      s["plan"] = o.plan_file;
      s["strategy"] = p->strategy;
      s["schedule"] = plan::schedule_kind_name(p->schedule);
      s["planned_schedule"] = plan::schedule_kind_name(planned_schedule);
      s["stages"] = p->num_stages();
      s["ranks"] = world;
      s["steps"] = summary->losses.size();
      s["predicted_s"] = predicted;
      s["closed_form_s"] = closed_form;
      s["measured_median_s"] = measured;
      s["measured_mean_s"] = summary->mean_iteration_s;
      s["error"] = error;
      s["emulated"] = t.exec.emulate && emulated_stages;
      s["testbed"] = testbed != nullptr ? std::string(testbed) : std::string();
      s["cost_source"] = p->cost_source;
      s["final_loss"] = summary->losses.empty() ? Json() : Json(summary->losses.back());
      if (!summary->val_losses.empty()) s["val_loss"] = summary->val_losses.back().second;
      // Tensor memory per stage: the plan's figure for the launch counts this run used
      // beside the measured one (the counting allocator; first replica of each stage).
      const std::vector<int> counts = schedule::launch_counts_for(*p, p->schedule);
      Json memory = Json::array();
      for (int i = 0; i < p->num_stages() && i < static_cast<int>(summary->peak_bytes.size()); ++i) {
        const plan::Stage& st = p->stages[i];
        memory.push_back({{"stage", i},
                          {"launch_count", counts[i]},
                          {"predicted_static_bytes", st.memory_static_bytes},
                          {"predicted_activation_bytes", st.activation_bytes},
                          {"predicted_bytes", st.memory_static_bytes + counts[i] * st.activation_bytes},
                          {"measured_base_bytes", summary->base_bytes[i]},
                          {"measured_peak_bytes", summary->peak_bytes[i]}});
      }
      s["memory"] = memory;
      // Rank 0's checkpoints: what the step waited and how long the write took.
      Json checkpoints = Json::array();
      for (const runtime::CheckpointTiming& ct : summary->checkpoints)
        checkpoints.push_back({{"step", ct.step}, {"blocked_s", ct.blocked_s}, {"write_s", ct.write_s}});
      s["checkpoints"] = checkpoints;
      s["async_checkpoints"] = t.async_checkpoints;
      s["stopped_at"] = summary->stopped_at >= 0 ? Json(summary->stopped_at) : Json();
      Status wrote = write_text_file_atomic(c.out + "/summary.json", s.dump(2) + "\n");
      if (!wrote.ok()) return ctx.fail("train", wrote);
    }
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
  cmd->add_option("--schedule", o->schedule, "Run the plan under another schedule: gpipe, 1f1b, harp-1f1b");
  cmd->add_option("--granularity", o->granularity, "Sub-layers per block (default: from the plan)")
      ->check(CLI::Range(1, 4));
  cmd->add_option("--job", o->job_file, "Job file whose training: section is the base configuration");
  // Overrides of the training section (docs/file_formats.md, "Job"): only the given ones
  // apply, each copying its field from the flag values into the resolved config.
  runtime::TrainConfig& f = o->flags;
  auto over = [&](CLI::Option* opt, auto runtime::TrainConfig::*field) {
    o->overrides.push_back(opt);
    o->apply.push_back([&f, field](runtime::TrainConfig& c) { c.*field = f.*field; });
  };
  using C = runtime::TrainConfig;
  over(cmd->add_option("--data", f.data, "Token file (.bin) or `synthetic`")->capture_default_str(), &C::data);
  over(cmd->add_option("--steps", f.steps, "Training steps")->capture_default_str(), &C::steps);
  over(cmd->add_option("--seed", f.seed, "Seed of weights and data")->capture_default_str(), &C::seed);
  over(cmd->add_option("--lr", f.lr, "Peak learning rate")->capture_default_str(), &C::lr);
  over(cmd->add_option("--warmup-steps", f.warmup_steps, "Linear warm-up steps")->capture_default_str(),
       &C::warmup_steps);
  over(cmd->add_option("--grad-clip", f.grad_clip, "Max global gradient norm (0: off)")->capture_default_str(),
       &C::grad_clip);
  over(cmd->add_option("--dtype", f.dtype,
                       "float32, float64, bfloat16 or float16 (the last two: float32 master weights; float16 on CUDA)")
           ->capture_default_str(),
       &C::dtype);
  over(cmd->add_option("--device", f.device, "auto (cuda:LOCAL_RANK when CUDA is there), cpu or cuda")
           ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
           ->capture_default_str(),
       &C::device);
  over(cmd->add_option("--loss-scale", f.loss_scale, "Dynamic loss scaling: auto (on for float16), dynamic or none")
           ->check(CLI::IsMember({"auto", "dynamic", "none"}))
           ->capture_default_str(),
       &C::loss_scale);
  over(cmd->add_option("--grad-reduce-dtype", f.grad_reduce_dtype,
                       "dtype of the data-parallel gradient all-reduce: auto (the gradients'), float32, float16 or "
                       "bfloat16 (NCCL only)")
           ->check(CLI::IsMember({"auto", "float32", "float16", "bfloat16"}))
           ->capture_default_str(),
       &C::grad_reduce_dtype);
  over(cmd->add_option("--recompute", f.recompute,
                       "Activation recomputation: plan (each stage as the plan says), none, selective or full")
           ->check(CLI::IsMember({"plan", "none", "selective", "full"}))
           ->capture_default_str(),
       &C::recompute);
  over(cmd->add_option("--out", f.out, "Output folder: metrics, traces, checkpoints")->capture_default_str(),
       &C::out);
  over(cmd->add_option("--checkpoint-every", f.checkpoint_every, "Checkpoint every K steps (0: never)"),
       &C::checkpoint_every);
  over(cmd->add_option("--keep-checkpoints", f.keep_checkpoints, "Keep the newest K checkpoints (0: all)"),
       &C::keep_checkpoints);
  over(cmd->add_option("--async-checkpoints", f.async_checkpoints,
                       "true: write checkpoints behind the next steps; false: before them")
           ->capture_default_str(),
       &C::async_checkpoints);
  cmd->add_flag("--resume", o->resume, "Continue from the last checkpoint in --out");
  over(cmd->add_option("--trace-steps", f.trace_steps, "Steps whose measured timeline is written, e.g. 3,4")
           ->delimiter(','),
       &C::trace_steps);
  over(cmd->add_option("--timeout-s", f.timeout_s, "Give up on a peer after this long")->capture_default_str(),
       &C::timeout_s);
  over(cmd->add_option("--threads", f.threads, "Intra-op threads per rank")->capture_default_str(), &C::threads);
  over(cmd->add_flag("--emulate", f.emulate, "Apply the plan's emulated device slowdowns"), &C::emulate);
  over(cmd->add_option("--init-from", f.init_from,
                       "Hugging Face GPT-2 or LLaMA weights: a .safetensors file or a folder (model.safetensors or the "
                       "index and its shards)"),
       &C::init_from);
  over(cmd->add_option("--val-data", f.val_data, "Validation token file (harp data prepare --val-fraction)"),
       &C::val_data);
  over(cmd->add_option("--eval-every", f.eval_every, "Validation loss every K steps and after the last")
           ->capture_default_str(),
       &C::eval_every);
  over(cmd->add_option("--eval-batches", f.eval_batches, "Global batches per validation")->capture_default_str(),
       &C::eval_batches);
  cmd->add_flag("--quiet", o->quiet, "No progress lines");
  cmd->callback([o, &ctx] { ctx.rc = run_train(*o, ctx); });
}

}  // namespace harp::cli
