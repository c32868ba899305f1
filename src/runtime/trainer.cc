// The per-rank training loop (see trainer.h).
#include "harp/runtime/trainer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <fstream>
#include <set>
#include <thread>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include "harp/common/document.h"
#include "harp/plan/closed_form.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/checkpoint.h"
#include "harp/runtime/hf_weights.h"
#include "harp/runtime/linear.h"
#include "harp/runtime/memory.h"
#include "harp/runtime/metrics.h"
#include "harp/schedule/lower_plan.h"

namespace harp::runtime {
namespace {

std::string trace_file(const std::string& dir, int rank) {
  return dir + "/trace.rank" + std::to_string(rank) + ".json";
}

}  // namespace

torch::Dtype torch_dtype(const std::string& name) {
  if (name == "float64") return torch::kFloat64;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  return torch::kFloat32;
}

StatusOr<torch::Device> resolve_device(const std::string& name, int local_rank) {
  const bool cuda = torch::cuda::is_available();
  if (name == "cpu" || (name == "auto" && !cuda)) return torch::Device(torch::kCPU);
  if (!cuda)
    return failed_precondition("device cuda: libtorch sees no CUDA device (a CPU build of libtorch, or no GPU); use "
                               "`--device cpu`, or build against a CUDA libtorch (docs/runtime.md, \"GPUs\")");
  const int count = static_cast<int>(torch::cuda::device_count());
  if (local_rank < 0 || local_rank >= count)
    return failed_precondition("LOCAL_RANK " + std::to_string(local_rank) + " but this machine has " +
                               std::to_string(count) + " CUDA device(s); launch at most " + std::to_string(count) +
                               " ranks per machine");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

Status check_dtype_on_device(const std::string& dtype, const torch::Device& device) {
  if (device.is_cpu() && dtype == "float16")
    return failed_precondition("dtype float16 computes on CUDA only, and this runs on the CPU; use bfloat16 on the "
                               "CPU, or a GPU");
  return Status();
}

void set_current_device(const torch::Device& device) {
  HARP_CHECK(device.is_cuda()) << "set_current_device takes a CUDA device";
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
}

TrainOptions train_options(const TrainConfig& c) {
  TrainOptions t;
  t.exec.seed = c.seed;
  t.exec.dtype = torch_dtype(c.dtype);
  // GradScaler's first scale, 2^16; powers of two keep scaling exact (precision.h).
  if (c.loss_scale == "dynamic" || (c.loss_scale == "auto" && c.dtype == "float16")) t.exec.loss_scale = 65536.0;
  if (c.grad_reduce_dtype != "auto") t.exec.grad_reduce_dtype = torch_dtype(c.grad_reduce_dtype);
  Recompute r;
  if (parse_recompute(c.recompute, &r)) t.exec.recompute = r;
  t.exec.optim.lr = c.lr;
  t.exec.optim.min_lr = c.min_lr > 0 ? c.min_lr : c.lr / 10;
  t.exec.optim.warmup_steps = c.warmup_steps;
  t.exec.optim.decay_steps = c.decay_steps > 0 ? c.decay_steps : std::max(c.steps, c.warmup_steps + 1);
  t.exec.optim.weight_decay = c.weight_decay;
  t.exec.optim.grad_clip = c.grad_clip;
  t.exec.emulate = c.emulate;
  t.steps = c.steps;
  t.out_dir = c.out;
  t.checkpoint_every = c.checkpoint_every;
  t.keep_checkpoints = c.keep_checkpoints;
  t.async_checkpoints = c.async_checkpoints;
  t.trace_steps = c.trace_steps;
  t.progress = c.progress;
  t.init_from = c.init_from;
  t.eval_every = c.val_data.empty() ? 0 : c.eval_every;
  t.eval_batches = c.eval_batches;
  t.resolved_config = train_config_to_json(c);
  return t;
}

StatusOr<std::unique_ptr<RunDirLock>> RunDirLock::take(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir + ": cannot create the output folder: " + ec.message());
  const std::string path = dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(path + ": cannot create the run lock: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      return failed_precondition(dir + ": another run is using this output folder; wait for it to end, or "
                                 "give this run another --out");
    return io_error(path + ": cannot lock: " + std::strerror(err));
  }
  return std::unique_ptr<RunDirLock>(new RunDirLock(fd));
}

RunDirLock::~RunDirLock() { ::close(fd_); }

void set_compute_threads(int threads, torch::Dtype dtype) {
  using SetThreads = void (*)(int);
  auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  // float32 products in oneDNN and bf16 ones in libtorch's oneDNN both run on torch's
  // OpenMP pool; only float64 (or a build without oneDNN) leaves them to OpenBLAS.
  const bool on_torch_pool =
      dtype == torch::kBFloat16 || dtype == torch::kHalf || (dtype == torch::kFloat32 && onednn_available());
  const bool blas = set_blas != nullptr && !on_torch_pool;
  torch::set_num_threads(blas ? 1 : threads);
  if (set_blas) set_blas(blas ? threads : 1);
}

Status check_trainable(const model::ModelSpec& model) {
  if (model.family == "gpt" || model.family == "llama") return Status();
  return failed_precondition("model " + model.gpt.name + " is of family " + model.family +
                             ", which has no runtime layers (gpt, llama); it can be planned and simulated but "
                             "not trained or profiled");
}

Status check_plan_matches_model(const plan::Plan& plan, const model::ModelSpec& model) {
  HARP_RETURN_IF_ERROR(check_trainable(model));
  const int L = model.num_layers();
  int expect = 0;
  for (int i = 0; i < plan.num_stages(); ++i) {
    const auto& s = plan.stages[i];
    if (s.first_layer < 0)
      return failed_precondition("stage " + std::to_string(i) +
                                 " has no `layers`: a plan to train needs layer ranges (make it with harp plan)");
    if (s.first_layer != expect)
      return failed_precondition("stage " + std::to_string(i) + " starts at layer " + std::to_string(s.first_layer) +
                                 " but the previous stage ends at " + std::to_string(expect));
    expect = s.last_layer;
  }
  if (expect != L)
    return failed_precondition("the plan covers layers [0, " + std::to_string(expect) + ") but model " +
                               model.gpt.name + " (k = " + std::to_string(model.gpt.granularity) + ") has " +
                               std::to_string(L) + " layers; use the model and granularity the plan was made for");
  for (int i = 0; i + 1 < plan.num_stages(); ++i) {
    const auto& want = model.layers[plan.stages[i].last_layer - 1].output_shape;
    if (!plan.stages[i].cut_shape.empty() && plan.stages[i].cut_shape != want)
      return failed_precondition("stage " + std::to_string(i) + " sends a tensor of shape " +
                                 Json(plan.stages[i].cut_shape).dump() + " per sample but the model's layer " +
                                 std::to_string(plan.stages[i].last_layer - 1) + " outputs " + Json(want).dump() +
                                 "; re-plan for this model");
  }
  const auto& g = model.gpt;
  const int kv_heads = g.family == "llama" ? g.kv_heads : g.heads;
  for (int i = 0; i < plan.num_stages(); ++i) {
    const int tp = plan.stages[i].tp;
    if (tp <= 1) continue;
    // The heads, key/value heads and ffn columns split evenly; every rank keeps some
    // vocabulary rows.
    const bool fits = g.heads % tp == 0 && kv_heads % tp == 0 && g.ffn_hidden % tp == 0 &&
                      vocab_rows(g.vocab, tp, tp - 1).second > vocab_rows(g.vocab, tp, tp - 1).first;
    if (!fits)
      return failed_precondition("stage " + std::to_string(i) + " has tp = " + std::to_string(tp) +
                                 ", which must divide the model's heads (" + std::to_string(g.heads) +
                                 "), key/value heads (" + std::to_string(kv_heads) + ") and ffn_hidden (" +
                                 std::to_string(g.ffn_hidden) + "); re-plan with a --max-tp that does");
  }
  if (!plan.model_fingerprint.empty() && plan.model_fingerprint != model.fingerprint())
    return failed_precondition("the plan was made for another model (fingerprint " + plan.model_fingerprint +
                               ", this model " + model.fingerprint() + "); re-plan or pass the plan's model");
  return Status();
}

StatusOr<TrainSummary> train(const model::ModelSpec& model, const plan::Plan& planned, Transport& comm,
                             const TokenSource& data, const TrainOptions& options, std::ostream& log) {
  const RankLayout& l = comm.layout();
  // A recomputation override applies to every stage and is what measured_plan.json
  // records; the predictions stay the plan's (plan with --recompute to predict it).
  plan::Plan plan = planned;
  if (options.exec.recompute)
    for (plan::Stage& st : plan.stages) st.recompute = *options.exec.recompute;
  HARP_RETURN_IF_ERROR(check_plan_matches_model(plan, model));
  // The runtime runs only a schedule the strict validator proves drains.
  auto lowered = schedule::lower_plan(plan);
  if (!lowered.ok()) return failed_precondition("the plan's schedule: " + lowered.status().message());
  HARP_RETURN_IF_ERROR(lowered->require_drains());
  Executor ex(model, plan, *lowered, comm, data, options.exec);
  const std::string ckpt_dir = options.out_dir + "/checkpoints";
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) return io_error(options.out_dir + ": cannot create the output folder: " + ec.message());
  TrainSummary summary;
  if (options.resume) {
    HARP_ASSIGN_OR_RETURN(summary.first_step, latest_checkpoint_step(ckpt_dir));
    HARP_RETURN_IF_ERROR(load_checkpoint(ex, ckpt_dir, summary.first_step, checkpoint_layout(plan, options.exec.seed)));
    if (l.rank == 0 && options.progress) log << "resumed from step " << summary.first_step << "\n";
  } else if (!options.init_from.empty()) {
    HARP_RETURN_IF_ERROR(load_hf(ex, model, options.init_from));
    if (l.rank == 0 && options.progress) log << "initialised from " << options.init_from << "\n";
  }
  HARP_ASSIGN_OR_RETURN(MetricsLog metrics, MetricsLog::open(options.out_dir, l.rank == 0, options.resume));
  if (l.rank == 0 && !options.resolved_config.is_null())
    HARP_RETURN_IF_ERROR(write_text_file_atomic(options.out_dir + "/train_config.json",
                                                options.resolved_config.dump(2) + "\n"));
  const std::set<int> traced(options.trace_steps.begin(), options.trace_steps.end());
  schedule::Timeline timeline;
  timeline.rows.push_back({l.rank, l.stage,
                           schedule::row_name(l.stage, plan.stages[l.stage].subcluster_name, l.dp_rank, l.dp())});
  const double tokens = static_cast<double>(plan.microbatches) * plan.microbatch_size * model.gpt.seq_len;
  const double flops = 3.0 * model.fwd_flops_per_sample() * plan.microbatches * plan.microbatch_size;
  double total_s = 0;
  int timed = 0;
  std::vector<double> step_seconds;  // the timed steps, for the median
  torch::Tensor measured_compute = torch::zeros({2 * l.num_stages()}, torch::kFloat64);
  // One buffer for the per-step metrics reduction, allocated once: the collective may
  // release its reference to a fresh tensor after the next step has begun, which made
  // the next step's measured base bytes depend on that timing.
  // The last element counts the ranks whose checkpoint write is done (checkpoint_writer.h).
  // The one after it counts the ranks asked to stop (TrainOptions::stop_requested).
  torch::Tensor stats = torch::zeros({5 * l.num_stages() + 2}, torch::kFloat64);
  int stop_at = -1;  // the checkpoint step all ranks stop after, once agreed
  CheckpointWriter checkpoints(ckpt_dir, options.keep_checkpoints, options.async_checkpoints,
                               options.before_checkpoint_write);
  auto report_checkpoints = [&] {
    for (const CheckpointTiming& t : checkpoints.take_completed()) {
      if (l.rank != 0 || !options.progress) continue;
      log << "checkpoint of step " << t.step << " complete: the step waited " << std::fixed << std::setprecision(3)
          << t.blocked_s << " s; rank 0 wrote for " << t.write_s << " s"
          << (options.async_checkpoints ? " behind the steps" : "") << std::defaultfloat << "\n";
    }
  };
  // Validation before the first step of a fresh run (as nanoGPT's iteration 0), every
  // eval_every steps and after the last.
  const bool evaluating = options.val_data != nullptr && options.eval_every > 0;
  auto validate = [&](int steps_done) {
    double sum = 0;
    for (int b = 0; b < options.eval_batches; ++b) sum += ex.evaluate(*options.val_data, b);
    summary.val_losses.emplace_back(steps_done, sum / options.eval_batches);
    metrics.write_eval(steps_done, summary.val_losses.back().second, options.progress, log);
  };
  if (evaluating && !options.resume) validate(0);
  for (int step = summary.first_step; step < options.steps; ++step) {
    const bool trace = traced.count(step) > 0;
    const double base_bytes = live_tensor_bytes();
    if (options.measure_memory) reset_peak_tensor_bytes();
    StepResult r = ex.run_step(step, trace);
    const auto step_end = std::chrono::steady_clock::now();
    const double peak_bytes = peak_tensor_bytes();
    if (trace)
      for (auto& e : ex.take_trace()) timeline.events.push_back(e);
    // Busy fraction, forward and backward time per microbatch of every stage (its first
    // replica), and its tensor memory, gathered in one reduction.
    const int S = l.num_stages();
    stats.zero_();
    if (l.dp_rank == 0 && l.tp_rank == 0) {
      stats[l.stage] = r.seconds > 0 ? r.compute_seconds / r.seconds : 0.0;
      stats[S + l.stage] = r.forward_seconds / plan.microbatches;
      stats[2 * S + l.stage] = r.backward_seconds / plan.microbatches;
      if (options.measure_memory) {
        stats[3 * S + l.stage] = base_bytes;
        stats[4 * S + l.stage] = peak_bytes;
      }
    }
    stats[5 * S] = checkpoints.vote();
    stats[5 * S + 1] = options.stop_requested && options.stop_requested() ? 1.0 : 0.0;
    comm.allreduce_world(stats, "rank " + std::to_string(l.rank) + " at step " + std::to_string(step) + " in metrics");
    // The iteration ends when every rank may start the next one: the metrics reduction
    // (which waits for the rank whose optimizer ends last) is part of it.
    r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_end).count();
    HARP_RETURN_IF_ERROR(checkpoints.tally(stats[5 * S].item<double>(), l));
    if (stop_at < 0 && stats[5 * S + 1].item<double>() > 0) {  // every rank sees it at this step
      const int every = options.checkpoint_every;
      stop_at = every > 0 ? (step + 1 + every - 1) / every * every : step + 1;
      if (stop_at >= options.steps) {
        stop_at = std::numeric_limits<int>::max();  // the run ends first anyway
      } else if (l.rank == 0 && options.progress) {
        log << "stop requested: stopping after the checkpoint of step " << stop_at << "\n";
      }
    }
    report_checkpoints();
    torch::Tensor busy = stats.slice(0, 0, S).contiguous();
    if (step > summary.first_step) {
      measured_compute += stats.slice(0, S, 3 * S);
      if (options.measure_memory) {
        summary.base_bytes.resize(S, 0.0);
        summary.peak_bytes.resize(S, 0.0);
        for (int s = 0; s < S; ++s) {
          summary.base_bytes[s] = std::max(summary.base_bytes[s], stats[3 * S + s].item<double>());
          summary.peak_bytes[s] = std::max(summary.peak_bytes[s], stats[4 * S + s].item<double>());
        }
      }
    }
    summary.losses.push_back(r.loss);
    if (step > summary.first_step) {
      total_s += r.seconds;
      step_seconds.push_back(r.seconds);
      ++timed;
    }
    StepMetrics m;
    m.step = step;
    m.total_steps = options.steps;
    m.loss = r.loss;
    m.grad_norm = r.grad_norm;
    m.lr = lr_at(options.exec.optim, step);
    m.iteration_s = r.seconds;
    m.tokens = tokens;
    m.flops = flops;
    m.busy_fraction.assign(busy.data_ptr<double>(), busy.data_ptr<double>() + S);
    m.loss_scale = r.loss_scale;
    m.skipped = r.skipped;
    metrics.write(m, options.progress, log);
    if (evaluating && ((step + 1) % options.eval_every == 0 || step + 1 == options.steps)) validate(step + 1);
    if ((options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0) || step + 1 == stop_at) {
      HARP_RETURN_IF_ERROR(checkpoints.save(ex, comm, step + 1, plan));
      report_checkpoints();
    }
    if (step + 1 == stop_at) {
      summary.stopped_at = stop_at;
      break;
    }
  }
  HARP_RETURN_IF_ERROR(checkpoints.finish(comm));
  report_checkpoints();
  if (summary.stopped_at >= 0 && l.rank == 0 && options.progress)
    log << "stopped at step " << summary.stopped_at << " on request; its checkpoint is complete\n";
  summary.checkpoints = checkpoints.timings();
  if (!traced.empty()) {
    // Each rank writes its part; rank 0 merges them into one trace with the writer the
    // simulator uses, so `harp trace compare` can put the two side by side.
    HARP_RETURN_IF_ERROR(write_text_file_atomic(trace_file(options.out_dir, l.rank),
                                                schedule::chrome_trace(timeline).dump() + "\n"));
    comm.barrier("writing traces");
    if (l.rank == 0) {
      schedule::Timeline merged;
      for (int r = 0; r < l.world_size; ++r) {
        const std::string file = trace_file(options.out_dir, r);
        HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
        HARP_ASSIGN_OR_RETURN(schedule::Timeline part, schedule::timeline_from_trace(doc, file));
        merged.rows.insert(merged.rows.end(), part.rows.begin(), part.rows.end());
        merged.events.insert(merged.events.end(), part.events.begin(), part.events.end());
      }
      // On a shared clock the spans count from the launch: start the trace at its first.
      double first_us = merged.events.empty() ? 0 : merged.events.front().start_us;
      for (const auto& e : merged.events) first_us = std::min(first_us, e.start_us);
      for (auto& e : merged.events) e.start_us -= first_us;
      HARP_RETURN_IF_ERROR(write_text_file_atomic(options.out_dir + "/trace.json",
                                                  schedule::chrome_trace(merged).dump() + "\n"));
    }
  }
  summary.mean_iteration_s = timed > 0 ? total_s / timed : 0;
  if (!step_seconds.empty()) {
    std::sort(step_seconds.begin(), step_seconds.end());
    const size_t n = step_seconds.size();
    summary.median_iteration_s = n % 2 ? step_seconds[n / 2] : (step_seconds[n / 2 - 1] + step_seconds[n / 2]) / 2;
  }
  if (l.rank == 0 && timed > 0) {
    // The plan with the measured compute times: `harp simulate` on it predicts this
    // machine, so predicted and measured timelines can be compared.
    const int S = l.num_stages();
    std::vector<double> fwd(S), bwd(S);
    for (int s = 0; s < S; ++s) {
      fwd[s] = measured_compute[s].item<double>() / timed;
      bwd[s] = measured_compute[S + s].item<double>() / timed;
    }
    HARP_RETURN_IF_ERROR(plan::save_plan(measured_plan(plan, fwd, bwd), options.out_dir + "/measured_plan.json"));
  }
  summary.tokens_per_s = summary.mean_iteration_s > 0 ? tokens / summary.mean_iteration_s : 0;
  return summary;
}

}  // namespace harp::runtime
