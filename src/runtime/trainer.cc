// The per-rank training loop (see trainer.h).
#include "harp/runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <set>

#include "harp/common/document.h"
#include "harp/common/format.h"
#include "harp/common/parse.h"
#include "harp/plan/plan_io.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/exec/memory.h"
#include "harp/runtime/generate.h"
#include "harp/runtime/io/checkpoint.h"
#include "harp/runtime/io/hf_weights.h"
#include "harp/runtime/io/metrics.h"
#include "harp/runtime/nn/trainable.h"
#include "harp/schedule/lower_plan.h"
#include "step_stats.h"

namespace harp::runtime {
namespace {

std::string trace_file(const std::string& dir, int rank) {
  return dir + "/trace.rank" + std::to_string(rank) + ".json";
}

}  // namespace

TrainOptions train_options(const config::TrainConfig& c) {
  TrainOptions t;
  t.exec.seed = c.seed;
  t.exec.dtype = torch_dtype(c.dtype);
  // GradScaler's first scale, 2^16; powers of two keep scaling exact (precision.h).
  using config::Dtype, config::LossScale;
  if (c.loss_scale == LossScale::kDynamic || (c.loss_scale == LossScale::kAuto && c.dtype == Dtype::kFloat16))
    t.exec.loss_scale = 65536.0;
  if (auto d = config::reduce_dtype(c.grad_reduce_dtype)) t.exec.grad_reduce_dtype = torch_dtype(*d);
  t.exec.recompute = config::forced_recompute(c.recompute);
  t.exec.zero = config::forced_zero(c.zero);
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
  t.sample_every = c.sample_every;
  t.sample_prompt = c.sample_prompt;
  t.sample_tokens = c.sample_tokens;
  t.drift = {c.drift_threshold, c.drift_window};
  t.link_probe_every = c.link_probe_every;
  t.resolved_config = config::train_config_to_json(c);
  return t;
}

namespace {

// The steps of one run after its setup (train()): each step, its reduction, metrics,
// validation and checkpoints, then the traces and the measured plan.
class Loop {
 public:
  Loop(const model::ModelSpec& model, const plan::Plan& plan, Executor& ex, Transport& comm,
       const TrainOptions& options, std::ostream& log, TrainSummary& summary, MetricsLog& metrics,
       const std::string& run_id)
      : model_(model), plan_(plan), ex_(ex), comm_(comm), l_(comm.layout()), o_(options), log_(log),
        summary_(summary), metrics_(metrics), probes_(idle_links(model, plan)),
        stats_(l_.num_stages(), plan.microbatches, static_cast<int>(probes_.size()), l_.world_size),
        measured_compute_(torch::zeros({2 * l_.world_size}, torch::kFloat64)),
        checkpoints_(options.out_dir + "/checkpoints", options.keep_checkpoints, options.async_checkpoints,
                     options.before_checkpoint_write),
        traced_(options.trace_steps.begin(), options.trace_steps.end()),
        tokens_(static_cast<double>(plan.microbatches) * plan.microbatch_size * model.gpt.seq_len),
        flops_(3.0 * model.fwd_flops_per_sample() * plan.microbatches * plan.microbatch_size),
        utilisation_per_s_(plan_utilisation(model, plan, 1.0)) {
    checkpoints_.set_run_id(run_id);
    timeline_.rows.push_back(
        {l_.rank, l_.stage, schedule::row_name(l_.stage, plan.stages[l_.stage].subcluster_name, l_.dp_rank, l_.dp())});
  }

  Status run() {
    // Validation before the first step of a fresh run (as nanoGPT's iteration 0), every
    // eval_every steps and after the last.
    if (evaluating() && !o_.resume) validate(0);
    for (int step = summary_.first_step; step < o_.steps; ++step) {
      HARP_ASSIGN_OR_RETURN(const bool stop, run_step(step));
      if (stop) break;
    }
    HARP_RETURN_IF_ERROR(checkpoints_.finish(comm_));
    report_checkpoints();
    if (summary_.stopped_at >= 0 && l_.rank == 0 && o_.progress)
      log_ << "stopped at step " << summary_.stopped_at << " on request; its checkpoint is complete\n";
    summary_.checkpoints = checkpoints_.timings();
    HARP_RETURN_IF_ERROR(write_traces());
    return finish();
  }

 private:
  bool evaluating() const { return o_.val_data != nullptr && o_.eval_every > 0; }

  void validate(int steps_done) {
    double sum = 0;
    for (int b = 0; b < o_.eval_batches; ++b) sum += ex_.evaluate(*o_.val_data, b);
    summary_.val_losses.emplace_back(steps_done, sum / o_.eval_batches);
    metrics_.write_eval(steps_done, summary_.val_losses.back().second, o_.progress, log_);
  }

  void report_checkpoints() {
    for (const CheckpointTiming& t : checkpoints_.take_completed()) {
      if (l_.rank != 0 || !o_.progress) continue;
      log_ << "checkpoint of step " << t.step << " complete: the step waited " << std::fixed << std::setprecision(3)
           << t.blocked_s << " s; rank 0 wrote for " << t.write_s << " s"
           << (o_.async_checkpoints ? " behind the steps" : "") << std::defaultfloat << "\n";
    }
  }

  // One step; true when the run stops after it (a stop request's checkpoint is done).
  StatusOr<bool> run_step(int step) {
    const bool trace = traced_.count(step) > 0;
    const c10::Device device = o_.exec.device;
    const double base_bytes = live_tensor_bytes(device);
    if (o_.measure_memory) reset_peak_tensor_bytes(device);
    if (o_.fake_slowdown || !o_.slowdown_file.empty())
      ex_.set_extra_slowdown((o_.fake_slowdown ? o_.fake_slowdown(step, l_.stage) : 1.0) * file_slowdown());
    StepResult r = ex_.run_step(step, trace);
    const auto step_end = std::chrono::steady_clock::now();
    const double peak_bytes = peak_tensor_bytes(device), reserved_bytes = peak_reserved_bytes(device);
    if (trace)
      for (auto& e : ex_.take_trace()) timeline_.events.push_back(e);
    stats_.clear();
    if (l_.dp_rank == 0 && l_.tp_rank == 0) {
      stats_.set_busy(l_.stage, r.seconds > 0 ? r.compute_seconds / r.seconds : 0.0);
      if (o_.measure_memory) stats_.set_memory(l_.stage, base_bytes, peak_bytes, reserved_bytes);
      stats_.set_link_ends(l_.stage, r);
    }
    if (l_.tp_rank == 0)
      stats_.set_replica(l_.rank, r.forward_seconds / plan_.microbatches, r.backward_seconds / plan_.microbatches);
    stats_.set_votes(checkpoints_.vote(), o_.stop_requested && o_.stop_requested() ? 1.0 : 0.0);
    if (probing_step(step)) probe_links(step);
    comm_.allreduce_world(stats_.tensor(),
                          "rank " + std::to_string(l_.rank) + " at step " + std::to_string(step) + " in metrics");
    // The iteration ends when every rank may start the next one: the metrics reduction
    // (which waits for the rank whose optimizer ends last) is part of it.
    r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_end).count();
    HARP_RETURN_IF_ERROR(checkpoints_.tally(stats_.checkpoint_votes(), l_));
    if (stop_at_ < 0 && stats_.stop_voted()) agree_on_stop(step);  // every rank sees it at this step
    report_checkpoints();
    detect_drift(step);
    if (step > summary_.first_step) record_timed(r.seconds);
    summary_.losses.push_back(r.loss);
    write_metrics(step, r);
    // Without loss scaling nothing overflows on purpose: gradients that are not finite
    // mean the run diverged (every rank sees the same reduced norm, so all stop here).
    if (r.skipped && !ex_.loss_scaler().enabled())
      return failed_precondition("step " + std::to_string(step) + ": the gradients are not finite (loss " +
                                 std::to_string(r.loss) + ") in a run without loss scaling: training diverged; "
                                 "fix: lower the learning rate (--lr), or resume from an earlier checkpoint");
    if (evaluating() && ((step + 1) % o_.eval_every == 0 || step + 1 == o_.steps)) validate(step + 1);
    if (o_.sample_tokenizer != nullptr && o_.sample_every > 0 &&
        ((step + 1) % o_.sample_every == 0 || step + 1 == o_.steps))
      HARP_RETURN_IF_ERROR(sample(step + 1));
    if ((o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0) || step + 1 == stop_at_) {
      HARP_RETURN_IF_ERROR(checkpoints_.save(ex_, comm_, step + 1, plan_));
      report_checkpoints();
    }
    if (step + 1 != stop_at_) return false;
    summary_.stopped_at = stop_at_;
    return true;
  }

  // The factor in o_.slowdown_file: 1 without the file; a text that is not a number in
  // [1, 1000] is named once and read as 1.
  double file_slowdown() {
    if (o_.slowdown_file.empty()) return 1.0;
    std::ifstream in(o_.slowdown_file);
    if (!in) return 1.0;
    std::string text;
    std::getline(in, text);
    auto f = parse_real(text);
    if (f.ok() && *f >= 1 && *f <= 1000) return *f;
    if (!slowdown_warned_) log_ << o_.slowdown_file << ": \"" << text.substr(0, 40) << "\" is not a slowdown in [1, 1000]; ignored\n";
    slowdown_warned_ = true;
    return 1.0;
  }

  bool probing_step(int step) const {
    return o_.link_probe_every > 0 && !probes_.empty() && (step + 1) % o_.link_probe_every == 0;
  }

  // The link probes of this step, in one order on every rank (a pair at a time, so none
  // waits in a cycle): each pair's first ranks exchange a cut-sized message there and
  // back; the initiator keeps half the round trip. Part of the step's time.
  void probe_links(int step) {
    for (size_t k = 0; k < probes_.size(); ++k) {
      const LinkProbe& p = probes_[k];
      const int from = l_.stage_ranks[p.from_stage][0], to = l_.stage_ranks[p.to_stage][0];
      if (l_.rank != from && l_.rank != to) continue;
      const double rt = comm_.round_trip(l_.rank == from ? to : from, static_cast<std::int64_t>(p.bytes),
                                         l_.rank == from, "rank " + std::to_string(l_.rank) + " at step " +
                                                              std::to_string(step) + " probing " + p.a + "-" + p.b);
      if (l_.rank == from) stats_.set_probe(static_cast<int>(k), rt / 2);
    }
  }

  // Every rank holds the same reduced figures, so every rank reaches the same verdict.
  void detect_drift(int step) {
    std::vector<double> per_stage(static_cast<size_t>(l_.num_stages()));
    for (int s = 0; s < l_.num_stages(); ++s)
      per_stage[s] = stats_.compute_s(l_.rank_of(s, 0, 0));  // its first replica
    // A link inside a node is not judged: it is fast (the δ rule's 1), and what a run reads
    // there is the receiver's wake-up (a 0.5 ms figure read 2.3 ms on a loaded 2-core
    // machine); metrics.jsonl still has it.
    std::vector<double> links = stats_.link_transit();
    for (size_t l = 0; l < links.size(); ++l)
      if (!plan_.stages[l].crosses_nodes) links[l] = 0;
    const std::optional<Drift> d = drift_.observe(step, per_stage, links);
    if (!d) return;
    summary_.drifts.push_back(*d);
    auto named = [&](int s) {
      const std::string& n = plan_.stages[static_cast<size_t>(s)].subcluster_name;
      return "stage " + std::to_string(s) + " (" + (n.empty() ? std::string("?") : n) + ")";
    };
    if (o_.progress && l_.rank == 0)
      log_ << "drift after step " << d->step + 1 << ": "
           << (d->link >= 0 ? "the link from " + named(d->link) + " to " + named(d->link + 1) + " takes "
                            : named(d->stage) + " computes ")
           << fmt("%.2fx", d->ratio) << " its baseline (" << fmt_time(d->measured_s) << " against "
           << fmt_time(d->baseline_s) << (d->link >= 0 ? " per message" : " per microbatch") << ", medians of "
           << o_.drift.window << " steps); re-plan with harp plan --calibrate " << o_.out_dir
           << "/measured_plan.json\n";
    metrics_.write_drift(*d);
  }

  // A sample from the model after `steps_done` steps (TrainOptions::sample_every): each
  // stage's first replica writes its parameters (tp shards gathered) to OUT/sample/, and
  // rank 0 reads the whole model back, generates on the CPU and prints the text.
  Status sample(int steps_done) {
    const std::string dir = o_.out_dir + "/sample";
    NamedTensors tensors;
    if (l_.dp_rank == 0) {
      tensors = ex_.optimizer().params();
      if (l_.tp() > 1) tensors = ex_.full_tensors(tensors);
      if (l_.tp_rank != 0) tensors.clear();
    }
    if (!tensors.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      HARP_RETURN_IF_ERROR(write_tensor_file(dir + "/stage_" + std::to_string(l_.stage) + ".bin", tensors, 0,
                                             CheckpointId{steps_done, l_.stage, "sample"}));
    }
    comm_.barrier("writing the sample's weights");
    if (l_.rank != 0) return Status();
    NamedTensors all;
    for (int s = 0; s < l_.num_stages(); ++s) {
      long long counter = 0;
      HARP_ASSIGN_OR_RETURN(NamedTensors part, read_tensor_file(dir + "/stage_" + std::to_string(s) + ".bin", &counter));
      for (auto& t : part) all.push_back(std::move(t));
    }
    const torch::Dtype dtype = o_.exec.dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    HARP_ASSIGN_OR_RETURN(LanguageModel lm, LanguageModel::from_params(model_, all, dtype, torch::kCPU));
    const std::vector<std::uint32_t> prompt = o_.sample_tokenizer->encode(o_.sample_prompt);
    GenerateOptions g;
    g.max_new_tokens = o_.sample_tokens;
    g.sampling.seed = o_.exec.seed * 1000003ULL + static_cast<std::uint64_t>(steps_done);
    HARP_ASSIGN_OR_RETURN(GenerateResult r,
                          generate(lm, std::vector<std::int64_t>(prompt.begin(), prompt.end()), g));
    std::vector<std::uint32_t> ids = prompt;
    ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
    if (o_.progress) log_ << "sample after " << steps_done << " steps: " << o_.sample_tokenizer->decode(ids) << "\n";
    metrics_.write_sample(steps_done, o_.sample_tokenizer->decode(ids));
    return Status();
  }

  // The checkpoint step all ranks stop after: the next multiple of checkpoint_every
  // (with none, one is written at once).
  void agree_on_stop(int step) {
    const int every = o_.checkpoint_every;
    stop_at_ = every > 0 ? (step + 1 + every - 1) / every * every : step + 1;
    if (stop_at_ >= o_.steps) {
      stop_at_ = std::numeric_limits<int>::max();  // the run ends first anyway
    } else if (l_.rank == 0 && o_.progress) {
      log_ << "stop requested: stopping after the checkpoint of step " << stop_at_ << "\n";
    }
  }

  // A step after the first: its time, compute and memory count.
  void record_timed(double seconds) {
    measured_compute_ += stats_.replica_compute();
    if (o_.measure_memory) {
      const int S = l_.num_stages();
      const bool first = summary_.state_bytes.empty();
      summary_.base_bytes.resize(S, 0.0);
      summary_.peak_bytes.resize(S, 0.0);
      summary_.reserved_bytes.resize(S, 0.0);
      summary_.state_bytes.resize(S, 0.0);
      for (int s = 0; s < S; ++s) {
        summary_.base_bytes[s] = std::max(summary_.base_bytes[s], stats_.base_bytes(s));
        summary_.state_bytes[s] = first ? stats_.base_bytes(s) : std::min(summary_.state_bytes[s], stats_.base_bytes(s));
        summary_.peak_bytes[s] = std::max(summary_.peak_bytes[s], stats_.peak_bytes(s));
        summary_.reserved_bytes[s] = std::max(summary_.reserved_bytes[s], stats_.reserved_bytes(s));
      }
    }
    total_s_ += seconds;
    step_seconds_.push_back(seconds);
  }

  void write_metrics(int step, const StepResult& r) {
    StepMetrics m;
    m.step = step;
    m.total_steps = o_.steps;
    m.loss = r.loss;
    m.grad_norm = r.grad_norm;
    m.lr = lr_at(o_.exec.optim, step);
    m.iteration_s = r.seconds;
    m.tokens = tokens_;
    m.flops = flops_;
    m.busy_fraction = stats_.busy();
    m.link_s = stats_.link_transit();
    if (probing_step(step))
      for (size_t k = 0; k < probes_.size(); ++k) {
        LinkProbe p = probes_[k];
        p.transit_s = stats_.probe(static_cast<int>(k));
        m.link_probes.push_back(p);
      }
    for (double u : utilisation_per_s_.stages) m.stage_mfu.push_back(u / r.seconds);
    m.mfu = utilisation_per_s_.overall / r.seconds;
    m.loss_scale = r.loss_scale;
    m.skipped = r.skipped;
    if (o_.resume && step == summary_.first_step) m.resumed_from = summary_.first_step;
    if (step + 1 == stop_at_) m.stopping_at = stop_at_;
    metrics_.write(m, o_.progress, log_);
  }

  // Each rank writes its part; rank 0 merges them into one trace with the writer the
  // simulator uses, so `harp trace compare` can put the two side by side.
  Status write_traces() {
    if (traced_.empty()) return Status();
    HARP_RETURN_IF_ERROR(write_text_file_atomic(trace_file(o_.out_dir, l_.rank),
                                                schedule::chrome_trace(timeline_).dump() + "\n"));
    comm_.barrier("writing traces");
    if (l_.rank != 0) return Status();
    schedule::Timeline merged;
    for (int r = 0; r < l_.world_size; ++r) {
      const std::string file = trace_file(o_.out_dir, r);
      HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
      HARP_ASSIGN_OR_RETURN(schedule::Timeline part, schedule::timeline_from_trace(doc, file));
      merged.rows.insert(merged.rows.end(), part.rows.begin(), part.rows.end());
      merged.events.insert(merged.events.end(), part.events.begin(), part.events.end());
    }
    // On a shared clock the spans count from the launch: start the trace at its first.
    double first_us = merged.events.empty() ? 0 : merged.events.front().start_us;
    for (const auto& e : merged.events) first_us = std::min(first_us, e.start_us);
    for (auto& e : merged.events) e.start_us -= first_us;
    return write_text_file_atomic(o_.out_dir + "/trace.json", schedule::chrome_trace(merged).dump() + "\n");
  }

  // The timed steps' mean and median, and (rank 0) the plan with the measured compute
  // times: `harp simulate` on it predicts this machine, so predicted and measured
  // timelines can be compared.
  Status finish() {
    const int timed = static_cast<int>(step_seconds_.size());
    summary_.mean_iteration_s = timed > 0 ? total_s_ / timed : 0;
    if (timed > 0) {
      std::sort(step_seconds_.begin(), step_seconds_.end());
      const size_t n = step_seconds_.size();
      summary_.median_iteration_s =
          n % 2 ? step_seconds_[n / 2] : (step_seconds_[n / 2 - 1] + step_seconds_[n / 2]) / 2;
    }
    if (l_.rank == 0 && timed > 0) {
      // Per stage its slowest replica's (a mixed stage's replicas differ; the plan's
      // fwd_s and bwd_s are the slowest's too), and each replica's forward + backward.
      const int S = l_.num_stages();
      std::vector<double> fwd(S), bwd(S);
      std::vector<std::vector<double>> replicas(S);
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < l_.dp_of(s); ++d) {
          const int r = l_.rank_of(s, d, 0);
          const double f = measured_compute_[2 * r].item<double>() / timed,
                       b = measured_compute_[2 * r + 1].item<double>() / timed;
          replicas[s].push_back(f + b);
          if (d == 0 || f + b > fwd[s] + bwd[s]) {
            fwd[s] = f;
            bwd[s] = b;
          }
        }
      HARP_RETURN_IF_ERROR(
          plan::save_plan(measured_plan(plan_, fwd, bwd, replicas), o_.out_dir + "/measured_plan.json"));
    }
    summary_.tokens_per_s = summary_.mean_iteration_s > 0 ? tokens_ / summary_.mean_iteration_s : 0;
    return Status();
  }

  const model::ModelSpec& model_;
  const plan::Plan& plan_;
  Executor& ex_;
  Transport& comm_;
  const RankLayout& l_;
  const TrainOptions& o_;
  std::ostream& log_;
  TrainSummary& summary_;
  MetricsLog& metrics_;
  std::vector<LinkProbe> probes_;  // the plan's idle links (idle_links)
  StepStats stats_;
  torch::Tensor measured_compute_;  // per rank: forward and backward seconds, summed over timed steps
  CheckpointWriter checkpoints_;
  const std::set<int> traced_;
  schedule::Timeline timeline_;
  const double tokens_, flops_;     // per step
  const Utilisation utilisation_per_s_;  // at one second per step: divide by the step's time
  DriftDetector drift_{static_cast<int>(plan_.stages.size()), o_.drift};
  bool slowdown_warned_ = false;
  int stop_at_ = -1;                // the checkpoint step all ranks stop after, once agreed
  double total_s_ = 0;
  std::vector<double> step_seconds_;  // the timed steps, for the median
};

}  // namespace

StatusOr<TrainSummary> train(const model::ModelSpec& model, const plan::Plan& planned, Transport& comm,
                             const TokenSource& data, const TrainOptions& options, std::ostream& log) {
  const RankLayout& l = comm.layout();
  // A recomputation override applies to every stage and is what measured_plan.json
  // records; the predictions stay the plan's (plan with --recompute to predict it).
  plan::Plan plan = planned;
  if (options.exec.recompute)
    for (plan::Stage& st : plan.stages) st.recompute = *options.exec.recompute;
  if (options.exec.zero)
    for (plan::Stage& st : plan.stages) st.zero = *options.exec.zero;
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
  std::string run_id;
  if (options.resume) {
    HARP_ASSIGN_OR_RETURN(summary.first_step, latest_checkpoint_step(ckpt_dir));
    // Before anything is loaded or written: a resumed run that would train nothing is a
    // mistake in --steps (the total, as in torchtitan and Megatron), not a finished run.
    if (summary.first_step >= options.steps)
      return failed_precondition("--resume: the last checkpoint in " + ckpt_dir + " is at step " +
                                 std::to_string(summary.first_step) + " and --steps is " +
                                 std::to_string(options.steps) + ", so there is nothing to train; fix: pass --steps "
                                 "above " + std::to_string(summary.first_step) + " (the total step count)");
    HARP_RETURN_IF_ERROR(load_checkpoint(ex, ckpt_dir, summary.first_step, checkpoint_layout(plan, options.exec.seed)));
    run_id = checkpoint_run_id(ckpt_dir, summary.first_step);
    if (l.rank == 0 && options.progress) log << "resumed from step " << summary.first_step << "\n";
  } else if (!options.init_from.empty()) {
    HARP_RETURN_IF_ERROR(load_hf(ex, model, options.init_from));
    if (l.rank == 0 && options.progress) log << "initialised from " << options.init_from << "\n";
  }
  if (run_id.empty()) run_id = new_run_id(comm);
  HARP_ASSIGN_OR_RETURN(MetricsLog metrics, MetricsLog::open(options.out_dir, l.rank == 0, options.resume));
  if (l.rank == 0 && !options.resolved_config.is_null())
    HARP_RETURN_IF_ERROR(write_text_file_atomic(options.out_dir + "/train_config.json",
                                                options.resolved_config.dump(2) + "\n"));
  HARP_RETURN_IF_ERROR(Loop(model, plan, ex, comm, options, log, summary, metrics, run_id).run());
  return summary;
}

}  // namespace harp::runtime
