// One rank's training run (see training_run.h).
#include "harp/runtime/training_run.h"

#include "harp/common/document.h"
#include "harp/common/format.h"
#include "harp/common/memory_limit.h"
#include "harp/launch/worker_env.h"
#include "harp/runtime/comm/comm.h"
#include "harp/runtime/comm/rendezvous.h"
#include "harp/runtime/exec/data.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/exec/memory.h"
#include "harp/runtime/io/metrics.h"
#include "harp/runtime/io/run_folder.h"
#include "harp/runtime/nn/trainable.h"
#include "harp/runtime/trainer.h"
#include "harp/schedule/generators.h"
#include "harp/schedule/lower_plan.h"
#include "harp/sim/run_report.h"

namespace harp::runtime {

struct TrainingRun::State {
  RunRequest r;
  std::ostream* log = nullptr;
  std::unique_ptr<TokenSource> data, val_data;
  std::unique_ptr<harp::data::Tokenizer> sample_tokenizer;
  torch::Device device{torch::kCPU};
  TrainOptions options;
  std::unique_ptr<RunDirLock> lock;
  std::unique_ptr<Transport> comm;
};

namespace {

// A token file the model can read: ids below its vocabulary, at least one sample long.
StatusOr<std::unique_ptr<TokenSource>> open_tokens(const std::string& path, const model::GptConfig& g) {
  HARP_ASSIGN_OR_RETURN(std::unique_ptr<TokenSource> d, open_token_file(path));
  if (d->vocab_limit() > g.vocab)
    return failed_precondition(path + " has token ids up to " + std::to_string(d->vocab_limit() - 1) +
                               " but the model's vocabulary is " + std::to_string(g.vocab) +
                               "; use a model with vocab >= " + std::to_string(d->vocab_limit()));
  if (d->size() < static_cast<std::int64_t>(g.seq_len) + 2)
    return failed_precondition(path + " holds " + std::to_string(d->size()) + " tokens, fewer than one sample of " +
                               std::to_string(g.seq_len) +
                               " + 2; use a longer token file (harp data prepare) or a shorter seq_len");
  return d;
}

// The training data: seeded synthetic tokens or a token file, and the validation file.
Status open_data(TrainingRun::State* s) {
  const config::TrainConfig& c = s->r.config;
  const model::GptConfig& g = s->r.model.gpt;
  if (c.data == "synthetic") {
    if (g.vocab > 65536)
      return failed_precondition("synthetic tokens are uint16 but the model's vocabulary is " +
                                 std::to_string(g.vocab) + "; use a token file, or a model with vocab <= 65536");
    s->data = synthetic_tokens(c.seed, 1 << 20, g.vocab);
  } else {
    HARP_ASSIGN_OR_RETURN(s->data, open_tokens(c.data, g));
  }
  if (!c.val_data.empty()) {
    HARP_ASSIGN_OR_RETURN(s->val_data, open_tokens(c.val_data, g));
  }
  if (c.sample_every > 0) {
    auto tokenizer = harp::data::load_tokenizer(c.sample_tokenizer);
    if (!tokenizer.ok())
      return invalid_argument("sample_tokenizer " + c.sample_tokenizer + ": " + tokenizer.status().message() +
                              "; samples during training take byte or GPT-2 BPE tokenizers (SentencePiece: harp "
                              "generate from a checkpoint)");
    if ((*tokenizer)->vocab_size() > g.vocab)
      return invalid_argument("sample_tokenizer " + c.sample_tokenizer + ": vocabulary " +
                              std::to_string((*tokenizer)->vocab_size()) + " is larger than the model's (" +
                              std::to_string(g.vocab) + "); use the tokenizer the data was prepared with");
    s->sample_tokenizer = std::move(*tokenizer);
  }
  return Status();
}

// The rank's device (cuda:LOCAL_RANK, as torchrun's ranks take theirs; CUDA ranks exchange
// tensors over NCCL) and the rules of its dtypes.
Status open_device(TrainingRun::State* s) {
  const config::TrainConfig& c = s->r.config;
  HARP_ASSIGN_OR_RETURN(s->device, resolve_device(c.device, s->r.env.local_rank));
  HARP_RETURN_IF_ERROR(check_dtype_on_device(c.dtype, s->device));
  if (s->device.is_cuda()) {
    const CudaDeviceInfo gpu = cuda_device_info(s->device);
    if (gpu.major > 0)
      HARP_RETURN_IF_ERROR(check_cuda_device(
          gpu, libtorch_cuda_archs(),
          c.dtype == config::Dtype::kBFloat16 || c.grad_reduce_dtype == config::GradReduceDtype::kBFloat16));
  }
  if (s->device.is_cpu() && c.grad_reduce_dtype == config::GradReduceDtype::kBFloat16)
    return failed_precondition("grad_reduce_dtype bfloat16 needs NCCL, and this rank runs on the CPU (Gloo cannot "
                               "all-reduce bfloat16); use float16 or float32");
  if (s->device.is_cuda() && !C10dTransport::nccl_available())
    return failed_precondition("this build has no NCCL (its libtorch lacks USE_C10D_NCCL); use --device cpu, or "
                               "build against a CUDA libtorch (docs/runtime.md, \"GPUs\")");
  if (s->device.is_cuda()) set_current_device(s->device);
  retain_freed_memory();
  set_compute_threads(c.threads, torch_dtype(c.dtype));
  // One rank per process: its tensor memory is the process's (summary.json "memory").
  install_counting_allocator();
  return Status();
}

// ", MFU 31.2% (stage 0 cpu 40.1%, stage 1 cpu-slow 22.0%)", or "" without declared peaks.
std::string utilisation_text(const Utilisation& u, const plan::Plan& p) {
  if (u.stages.empty()) return "";
  std::string out = fmt(", MFU %.1f%% (", 100 * u.overall);
  for (int i = 0; i < p.num_stages(); ++i)
    out += fmt("%sstage %d %s %.1f%%", i ? ", " : "", i, p.stages[i].device.c_str(), 100 * u.stages[i]);
  return out + ")";
}

// Each stage's predicted tensor bytes under the schedule this run used: static memory plus
// the most its list holds at once (schedule::peak_held_bytes).
std::vector<double> predicted_stage_bytes(const plan::Plan& p) {
  const std::vector<int> counts = schedule::launch_counts_for(p, p.schedule);
  const auto lowered = schedule::lower_plan(p);
  std::vector<double> out;
  for (int i = 0; i < p.num_stages(); ++i) {
    const plan::Stage& st = p.stages[i];
    out.push_back(st.memory_static_bytes + (lowered.ok()
                                                ? schedule::peak_held_bytes(lowered->lowered.actions[i],
                                                                            st.activation_bytes, st.weight_grad_bytes)
                                                : counts[i] * st.activation_bytes));
  }
  return out;
}

// "memory per stage, measured peak / predicted: stage 0 1.2 GB / 1.1 GB (+9%), ...", with
// the allocator's reserved peak where it differs (CUDA's cache); "" without measurements.
std::string memory_text(const TrainSummary& summary, const plan::Plan& p) {
  if (summary.peak_bytes.empty()) return "";
  const std::vector<double> predicted = predicted_stage_bytes(p);
  std::string out = "memory per stage, measured peak / predicted:";
  for (int i = 0; i < p.num_stages() && i < static_cast<int>(summary.peak_bytes.size()); ++i) {
    const double measured = summary.peak_bytes[i], reserved = summary.reserved_bytes[i];
    out += fmt("%s stage %d %s", i ? "," : "", i, fmt_bytes(measured).c_str());
    if (reserved > measured) out += " (" + fmt_bytes(reserved) + " reserved)";
    out += " / " + fmt_bytes(predicted[i]);
    if (predicted[i] > 0) out += fmt(" (%+.0f%%)", 100 * (measured - predicted[i]) / predicted[i]);
  }
  return out;
}

// summary.json: the prediction beside the measurement, memory per stage, checkpoints.
Json summary_json(const TrainingRun::State& s, const TrainSummary& summary, const sim::PredictionReport& report) {
  const plan::Plan& p = s.r.plan;
  Json j;
  j["plan"] = s.r.plan_file;
  j["strategy"] = p.strategy;
  j["schedule"] = plan::schedule_kind_name(p.schedule);
  j["planned_schedule"] = plan::schedule_kind_name(s.r.planned_schedule);
  j["stages"] = p.num_stages();
  j["ranks"] = s.r.env.world_size;
  j["steps"] = summary.losses.size();
  j["predicted_s"] = report.predicted_s;
  j["closed_form_s"] = report.closed_form_s;
  j["measured_median_s"] = report.measured_s;
  j["measured_mean_s"] = summary.mean_iteration_s;
  j["error"] = report.error;
  j["emulated"] = s.options.exec.emulate && report.emulated_stages;
  j["testbed"] = s.r.env.testbed;
  j["cost_source"] = p.cost_source;
  j["final_loss"] = summary.losses.empty() ? Json() : Json(summary.losses.back());
  if (!summary.val_losses.empty()) j["val_loss"] = summary.val_losses.back().second;
  // Model FLOPs utilisation at the median step (cost/utilisation.h), when the plan
  // declares its devices' peaks.
  const Utilisation u = plan_utilisation(s.r.model, p, summary.median_iteration_s);
  if (!u.stages.empty()) {
    j["mfu"] = u.overall;
    Json stages = Json::array();
    for (int i = 0; i < p.num_stages(); ++i)
      stages.push_back({{"stage", i}, {"device", p.stages[i].device}, {"peak_tflops", p.stages[i].peak_tflops},
                        {"devices", p.stages[i].dp * p.stages[i].tp}, {"mfu", u.stages[i]}});
    j["stage_mfu"] = stages;
  }
  // Tensor memory per stage: the plan's figure for the schedule this run used (what each
  // stage's list holds at most: schedule::peak_held_bytes) beside the measured one (the
  // counting allocator on the CPU, the caching allocator on CUDA; first replica of each
  // stage).
  const std::vector<int> counts = schedule::launch_counts_for(p, p.schedule);
  const std::vector<double> predicted = predicted_stage_bytes(p);
  Json memory = Json::array();
  for (int i = 0; i < p.num_stages() && i < static_cast<int>(summary.peak_bytes.size()); ++i) {
    const plan::Stage& st = p.stages[i];
    memory.push_back({{"stage", i},
                      {"launch_count", counts[i]},
                      {"predicted_static_bytes", st.memory_static_bytes},
                      {"predicted_working_bytes", st.memory_working_bytes},
                      {"predicted_activation_bytes", st.activation_bytes},
                      {"predicted_weight_grad_bytes", st.weight_grad_bytes},
                      {"predicted_bytes", predicted[i]},
                      {"measured_base_bytes", summary.base_bytes[i]},
                      {"measured_state_bytes", summary.state_bytes[i]},
                      {"measured_peak_bytes", summary.peak_bytes[i]},
                      {"measured_reserved_bytes", summary.reserved_bytes[i]}});
  }
  j["memory"] = memory;
  // Rank 0's checkpoints: what the step waited and how long the write took.
  Json checkpoints = Json::array();
  for (const CheckpointTiming& ct : summary.checkpoints)
    checkpoints.push_back({{"step", ct.step}, {"blocked_s", ct.blocked_s}, {"write_s", ct.write_s}});
  j["checkpoints"] = checkpoints;
  j["async_checkpoints"] = s.options.async_checkpoints;
  j["stopped_at"] = summary.stopped_at >= 0 ? Json(summary.stopped_at) : Json();
  Json drifts = Json::array();
  for (const Drift& d : summary.drifts)
    drifts.push_back({{"after_steps", d.step + 1}, {"stage", d.stage}, {"link", d.link}, {"ratio", d.ratio},
                      {"baseline_s", d.baseline_s}, {"measured_s", d.measured_s}});
  j["drifts"] = drifts;
  return j;
}

// Across machines (GROUP_WORLD_SIZE > 1): one line per rank saying where it runs, and a
// rank whose plan device is on another machine (the plan's `nodes`) is refused: its
// launcher ran a different number of workers than the plan places there.
Status place_on_machine(const plan::Plan& p, const RankLayout& l, const launch::WorkerEnv& env, bool progress,
                        std::ostream& log) {
  if (env.group_world_size <= 1) return Status();
  const int device = l.rank_device.empty() ? -1 : l.rank_device[static_cast<size_t>(env.rank)];
  const int node = device < 0 ? -1 : p.node_of_device(device);
  const plan::Stage& st = p.stages[static_cast<size_t>(l.stage)];
  if (progress)
    log << "rank " << env.rank << " of " << env.world_size << ": machine " << env.group_rank << " of "
        << env.group_world_size << ", local rank " << env.local_rank << "; the plan's device "
        << (device < 0 ? std::string("?") : std::to_string(device)) << " (stage " << l.stage
        << (st.subcluster_name.empty() ? std::string() : ", " + st.subcluster_name)
        << (node < 0 ? std::string() : ", machine " + std::to_string(node)) << ")\n";
  if (node < 0 || node == env.group_rank) return Status();
  std::string per_node;
  const std::vector<int> counts = p.ranks_per_node();
  for (size_t m = 0; m < counts.size(); ++m) per_node += (m ? " + " : "") + std::to_string(counts[m]);
  return failed_precondition("rank " + std::to_string(env.rank) + " runs on machine " + std::to_string(env.group_rank) +
                             " (GROUP_RANK), but the plan puts its device " + std::to_string(device) + " on machine " +
                             std::to_string(node) + "; launch each machine with the plan's workers on it (" + per_node +
                             "): `harp launch --nnodes " + std::to_string(counts.size()) +
                             " --node-rank M --plan PLAN`, or --nproc per machine as the plan says");
}

// The least this rank's stage holds on a CPU: its share of the weights and their
// gradients in float32 (4 + 4 bytes a parameter, over tp; gradients also over dp under
// ZeRO-2) and AdamW's two moments (8 bytes, over dp under ZeRO-1 and 2). A run that
// cannot hold it is refused before any work, naming the limit, as harp profile does; it
// was killed by the kernel 18 s in, without a word (GPT-1.3B under a 2 GiB cgroup).
// Activations come on top; this is a floor, not the plan's prediction.
Status check_host_memory(const plan::Plan& p, const RankLayout& l, const model::ModelSpec& m,
                         const torch::Device& device) {
  if (!device.is_cpu()) return Status();
  const plan::Stage& st = p.stages[static_cast<size_t>(l.stage)];
  double params = 0;
  for (int i = std::max(0, st.first_layer); i < st.last_layer && i < m.num_layers(); ++i)
    params += static_cast<double>(m.layers[static_cast<size_t>(i)].param_count);
  params /= std::max(1, st.tp);
  const double dp = std::max(1, st.dp);
  const double bytes = params * (4 + 4 / (st.zero >= 2 ? dp : 1) + 8 / (st.zero >= 1 ? dp : 1));
  const MemoryLimit have = usable_memory();
  if (have.bytes <= 0 || bytes <= have.bytes) return Status();
  return infeasible(
      fmt("stage %d of the plan holds %.0fM parameters on this rank: their float32 weights, "
          "gradients and AdamW state alone take %.1f GiB, and this process may use %.1f GiB (%s); "
          "train on a larger machine or under a higher limit, or plan more stages or ZeRO",
          l.stage, params / 1e6, bytes / (1 << 30), have.bytes / (1 << 30), have.source.c_str()));
}

}  // namespace

TrainingRun::TrainingRun(std::unique_ptr<State> state) : s_(std::move(state)) {}
TrainingRun::~TrainingRun() = default;

StatusOr<std::unique_ptr<TrainingRun>> TrainingRun::open(RunRequest request, std::ostream& log) {
  auto s = std::make_unique<State>();
  s->r = std::move(request);
  s->log = &log;
  const config::TrainConfig& c = s->r.config;
  const launch::WorkerEnv& env = s->r.env;
  HARP_RETURN_IF_ERROR(check_plan_matches_model(s->r.plan, s->r.model));
  HARP_ASSIGN_OR_RETURN(RankLayout layout, layout_for(s->r.plan, env.world_size, env.rank));
  HARP_RETURN_IF_ERROR(place_on_machine(s->r.plan, layout, env, c.progress, log));
  HARP_RETURN_IF_ERROR(open_data(s.get()));
  HARP_RETURN_IF_ERROR(open_device(s.get()));
  HARP_RETURN_IF_ERROR(check_host_memory(s->r.plan, layout, s->r.model, s->device));
  s->options = train_options(c);
  s->options.exec.device = s->device;
  s->options.measure_memory = true;  // the counting allocator (CPU), the caching allocator's statistics (CUDA)
  s->options.resume = s->r.resume;
  s->options.val_data = s->val_data.get();
  s->options.sample_tokenizer = s->sample_tokenizer.get();
  if (!s->r.env.testbed.empty()) {
    const plan::Stage& stage = s->r.plan.stages[static_cast<size_t>(layout.stage)];
    if (!stage.subcluster_name.empty())
      s->options.slowdown_file = launch::testbed_slowdown_file(s->r.env.testbed, stage.subcluster_name);
  }
  s->options.stop_requested = s->r.stop_requested;
  s->options.exec.emulate = c.emulate || env.emulate;  // harp launch --emulate
  if (env.clock_origin_ns > 0) s->options.exec.clock_origin_ns = env.clock_origin_ns;  // one clock for all ranks
  if (env.rank == 0) {
    HARP_ASSIGN_OR_RETURN(s->lock, RunDirLock::take(c.out));
  }
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(c.timeout_s * 1000));
  s->comm = C10dTransport::create(rendezvous_store(env, timeout), layout, timeout,
                                  s->r.model.gpt.tied_embeddings, s->device);
  return std::unique_ptr<TrainingRun>(new TrainingRun(std::move(s)));
}

Status TrainingRun::run() {
  State& s = *s_;
  const config::TrainConfig& c = s.r.config;
  const plan::Plan& p = s.r.plan;
  const model::ModelSpec& m = s.r.model;
  std::ostream& log = *s.log;
  const bool rank0 = s.r.env.rank == 0;
  if (rank0 && c.progress)
    log << "training " << m.gpt.name << " (k = " << m.gpt.granularity << ", " << m.num_layers() << " layers) on "
        << s.r.env.world_size << " ranks, " << p.num_stages() << " stages, schedule "
        << plan::schedule_kind_name(p.schedule) << ", B = " << p.microbatches << " x " << p.microbatch_size
        << (s.device.is_cuda() ? ", on CUDA (NCCL)" : "") << (s.options.exec.emulate ? ", emulating slower devices" : "")
        << (!s.r.env.testbed.empty() ? ", links shaped by testbed " + s.r.env.testbed : std::string()) << "\n";
  HARP_ASSIGN_OR_RETURN(TrainSummary summary, train(m, p, *s.comm, *s.data, s.options, log));
  if (!rank0) return Status();
  if (c.progress)
    log << "done: " << summary.losses.size() << " steps, median " << fmt_time(summary.median_iteration_s)
        << "/step (mean " << fmt_time(summary.mean_iteration_s) << "), " << fmt("%.0f", summary.tokens_per_s)
        << " tokens/s" << utilisation_text(plan_utilisation(m, p, summary.median_iteration_s), p) << "; metrics in "
        << c.out << "/metrics.jsonl\n";
  // The plan's own claim beside the measurement (sim/run_report.h).
  const sim::PredictionReport report = sim::predict_against_measured(p, summary.median_iteration_s);
  if (c.progress && report.predicted_s > 0 && report.measured_s > 0)
    log << sim::prediction_line(report, p, s.r.planned_schedule, s.options.exec.emulate) << "\n";
  if (c.progress && s.device.is_cuda()) log << memory_text(summary, p) << "\n";
  // The same figures for scripts (make demo's table, bench/): OUT/summary.json.
  return write_text_file_atomic(c.out + "/summary.json", summary_json(s, summary, report).dump(2) + "\n");
}

}  // namespace harp::runtime
