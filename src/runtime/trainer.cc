// The per-rank training loop (see trainer.h).
#include "harp/runtime/trainer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "harp/common/document.h"
#include "harp/plan/closed_form.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/checkpoint.h"
#include "harp/schedule/lower_plan.h"

namespace harp::runtime {
namespace {

std::string trace_file(const std::string& dir, int rank) {
  return dir + "/trace.rank" + std::to_string(rank) + ".json";
}

Json trace_events(const std::vector<std::pair<int, TraceEvent>>& events, int rank, int stage) {
  Json out = Json::array();
  out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank},
                 {"args", {{"name", "stage " + std::to_string(stage) + " (rank " + std::to_string(rank) + ")"}}}});
  out.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  for (const auto& [step, e] : events) {
    out.push_back({{"name", schedule::short_name(e.action)}, {"ph", "X"}, {"pid", rank}, {"tid", 0}, {"ts", e.start_us},
                   {"dur", e.end_us - e.start_us}, {"args", {{"step", step}, {"microbatch", e.action.microbatch}}}});
  }
  return out;
}

Status save_checkpoint(Executor& ex, Comm& comm, const std::string& dir, int steps_done, const plan::Plan& plan) {
  const RankLayout& l = comm.layout();
  const std::string sd = checkpoint_step_dir(dir, steps_done);
  std::error_code ec;
  std::filesystem::create_directories(sd, ec);
  if (ec) return io_error(sd + ": cannot create the checkpoint folder: " + ec.message());
  if (l.dp_rank == 0) {
    NamedTensors tensors = ex.optimizer().params();
    for (auto& s : ex.optimizer().state()) tensors.push_back(s);
    HARP_RETURN_IF_ERROR(write_tensor_file(sd + "/stage_" + std::to_string(l.stage) + ".bin", tensors,
                                           ex.optimizer().steps_taken()));
  }
  comm.barrier("checkpoint of step " + std::to_string(steps_done));
  if (l.rank == 0) {
    Json manifest = {{"step", steps_done}, {"stages", plan.num_stages()}, {"microbatches", plan.microbatches},
                     {"schedule", plan::schedule_kind_name(plan.schedule)}};
    HARP_RETURN_IF_ERROR(mark_checkpoint_complete(dir, steps_done, manifest.dump(2) + "\n"));
  }
  return Status();
}

Status load_checkpoint(Executor& ex, const std::string& dir, int step) {
  long long opt_steps = 0;
  HARP_ASSIGN_OR_RETURN(NamedTensors all, read_checkpoint(dir, step, &opt_steps));
  std::map<std::string, torch::Tensor> by_name(all.begin(), all.end());
  torch::NoGradGuard no_grad;
  NamedTensors state;
  for (auto& [name, p] : ex.optimizer().params()) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      return not_found(checkpoint_step_dir(dir, step) + ": has no parameter `" + name +
                       "`; the checkpoint is of another model");
    if (!it->second.sizes().equals(p.sizes()))
      return invalid_argument(checkpoint_step_dir(dir, step) + ": parameter `" + name + "` has another shape");
    p.copy_(it->second);
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
      auto s = by_name.find(name + suffix);
      if (s != by_name.end()) state.emplace_back(s->first, s->second);
    }
  }
  std::string error;
  if (!ex.optimizer().load_state(state, opt_steps, &error))
    return invalid_argument(checkpoint_step_dir(dir, step) + ": optimizer state: " + error);
  return Status();
}

}  // namespace

void set_compute_threads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas(1);
}

Status check_plan_matches_model(const plan::Plan& plan, const model::ModelSpec& model) {
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
  if (!plan.model_fingerprint.empty() && plan.model_fingerprint != model.fingerprint())
    return failed_precondition("the plan was made for another model (fingerprint " + plan.model_fingerprint +
                               ", this model " + model.fingerprint() + "); re-plan or pass the plan's model");
  return Status();
}

StatusOr<TrainSummary> train(const model::ModelSpec& model, const plan::Plan& plan, Comm& comm,
                             const TokenSource& data, const TrainOptions& options, std::ostream& log) {
  const RankLayout& l = comm.layout();
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
    HARP_RETURN_IF_ERROR(load_checkpoint(ex, ckpt_dir, summary.first_step));
    if (l.rank == 0 && options.progress) log << "resumed from step " << summary.first_step << "\n";
  }
  std::ofstream metrics;
  if (l.rank == 0) {
    metrics.open(options.out_dir + "/metrics.jsonl", options.resume ? std::ios::app : std::ios::trunc);
    if (!metrics) return io_error(options.out_dir + "/metrics.jsonl: cannot open for writing");
  }
  const std::set<int> traced(options.trace_steps.begin(), options.trace_steps.end());
  std::vector<std::pair<int, TraceEvent>> events;
  const double tokens = static_cast<double>(plan.microbatches) * plan.microbatch_size * model.gpt.seq_len;
  const double flops = 3.0 * model.fwd_flops_per_sample() * plan.microbatches * plan.microbatch_size;
  double total_s = 0;
  int timed = 0;
  torch::Tensor measured_compute = torch::zeros({2 * l.num_stages()}, torch::kFloat64);
  for (int step = summary.first_step; step < options.steps; ++step) {
    if (step == options.exit_at_step) _exit(17);  // fault injection: die without a word
    while (step == options.stall_at_step) std::this_thread::sleep_for(std::chrono::seconds(1));
    const bool trace = traced.count(step) > 0;
    StepResult r = ex.run_step(step, trace);
    if (trace)
      for (auto& e : ex.take_trace()) events.emplace_back(step, e);
    // Busy fraction, forward and backward time per microbatch of every stage (its first
    // replica), gathered in one reduction.
    const int S = l.num_stages();
    torch::Tensor stats = torch::zeros({3 * S}, torch::kFloat64);
    if (l.dp_rank == 0) {
      stats[l.stage] = r.seconds > 0 ? r.compute_seconds / r.seconds : 0.0;
      stats[S + l.stage] = r.forward_seconds / plan.microbatches;
      stats[2 * S + l.stage] = r.backward_seconds / plan.microbatches;
    }
    comm.allreduce_world(stats, "rank " + std::to_string(l.rank) + " at step " + std::to_string(step) + " in metrics");
    torch::Tensor busy = stats.slice(0, 0, S).contiguous();
    if (step > summary.first_step) measured_compute += stats.slice(0, S, 3 * S);
    summary.losses.push_back(r.loss);
    if (step > summary.first_step) {
      total_s += r.seconds;
      ++timed;
    }
    if (l.rank == 0) {
      Json line = {{"step", step}, {"loss", r.loss}, {"grad_norm", r.grad_norm}, {"iteration_s", r.seconds},
                   {"tokens_per_s", tokens / r.seconds}, {"tflops", flops / r.seconds / 1e12},
                   {"lr", lr_at(options.exec.optim, step)},
                   {"busy_fraction", std::vector<double>(busy.data_ptr<double>(), busy.data_ptr<double>() + l.num_stages())}};
      metrics << line.dump() << "\n" << std::flush;
      if (options.progress) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "step %d/%d  loss %.4f  %.1f ms/step  %.0f tokens/s\n", step + 1,
                      options.steps, r.loss, r.seconds * 1e3, tokens / r.seconds);
        log << buf << std::flush;
      }
    }
    if (options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0)
      HARP_RETURN_IF_ERROR(save_checkpoint(ex, comm, ckpt_dir, step + 1, plan));
  }
  if (!traced.empty()) {
    HARP_RETURN_IF_ERROR(write_text_file_atomic(trace_file(options.out_dir, l.rank),
                                                trace_events(events, l.rank, l.stage).dump() + "\n"));
    comm.barrier("writing traces");
    if (l.rank == 0) {
      Json merged = {{"traceEvents", Json::array()}, {"displayTimeUnit", "ms"}};
      for (int r = 0; r < l.world_size; ++r) {
        auto part = load_document(trace_file(options.out_dir, r));
        if (!part.ok()) return part.status();
        for (auto& e : *part) merged["traceEvents"].push_back(e);
      }
      HARP_RETURN_IF_ERROR(write_text_file_atomic(options.out_dir + "/trace.json", merged.dump() + "\n"));
    }
  }
  summary.mean_iteration_s = timed > 0 ? total_s / timed : 0;
  if (l.rank == 0 && timed > 0) {
    // The plan with the measured compute times: `harp simulate` on it predicts this
    // machine, so predicted and measured timelines can be compared.
    plan::Plan measured = plan;
    const int S = l.num_stages();
    for (int s = 0; s < S; ++s) {
      measured.stages[s].fwd_s = measured_compute[s].item<double>() / timed;
      measured.stages[s].bwd_s = measured_compute[S + s].item<double>() / timed;
      measured.stages[s].comm_s = measured.stages[s].comm_latency_s = 0;  // loopback: microseconds
      measured.stages[s].allreduce_s = measured.stages[s].optimizer_s = 0;
    }
    measured.predicted = plan::closed_form(measured);
    HARP_RETURN_IF_ERROR(plan::save_plan(measured, options.out_dir + "/measured_plan.json"));
  }
  summary.tokens_per_s = summary.mean_iteration_s > 0 ? tokens / summary.mean_iteration_s : 0;
  return summary;
}

}  // namespace harp::runtime
