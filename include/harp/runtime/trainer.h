// The training loop of one rank: steps of the plan's schedule, metrics (JSONL, one line
// per step, written by rank 0), a progress line, Chrome traces of chosen steps (the
// simulator's format, so predicted and measured timelines open side by side), the plan
// re-timed with measured compute (measured_plan.json), atomic checksummed checkpoints
// every K steps and exact resume.
#pragma once

#include <chrono>
#include <memory>
#include <ostream>
#include <functional>
#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/runtime/checkpoint_writer.h"
#include "harp/runtime/executor.h"
#include "harp/runtime/train_config.h"

namespace harp::runtime {

struct TrainOptions {
  ExecConfig exec;
  int steps = 10;                   // total steps (a resumed run continues up to it)
  std::string out_dir = "out/train";
  int checkpoint_every = 0;         // 0: no checkpoints
  int keep_checkpoints = 0;         // keep the newest K complete checkpoints; 0: all
  bool async_checkpoints = true;    // write them behind the next steps (checkpoint_writer.h)
  std::function<void()> before_checkpoint_write;  // tests: runs on the writer's thread first
  // Polled by every rank after each step: once any rank says yes, all stop after the
  // next checkpoint (the next multiple of checkpoint_every; with none, one is written
  // at once) is complete. harp train: SIGUSR1 (elastic re-admission, cmd_launch.h).
  std::function<bool()> stop_requested;
  bool resume = false;              // continue from out_dir/checkpoints/latest
  std::string init_from;            // Hugging Face GPT-2 weights (hf_weights.h); not when resuming
  std::vector<int> trace_steps;     // steps whose measured timeline is written
  bool progress = true;             // rank 0 prints a line per step
  Json resolved_config;             // written by rank 0 as OUT/train_config.json (if not null)
  // Per-stage tensor memory in TrainSummary (runtime/memory.h). REQUIRES: one rank per
  // process, the counting allocator installed before the model is built.
  bool measure_memory = false;
  // Validation: before the first step (unless resuming), every `eval_every` steps and
  // after the last, the mean loss of `eval_batches` global batches of `val_data`
  // (Executor::evaluate), in metrics.jsonl and the progress lines (MetricsLog::
  // write_eval). Off when val_data is null or eval_every is 0.
  const TokenSource* val_data = nullptr;
  int eval_every = 0;
  int eval_batches = 2;
};

// The torch dtype of a TrainConfig dtype name ("float32" | "float64" | "bfloat16" |
// "float16"; ExecConfig::dtype, ExecConfig::grad_reduce_dtype).
torch::Dtype torch_dtype(const std::string& name);

// The device of a TrainConfig device ("auto" | "cpu" | "cuda") for the rank that
// LOCAL_RANK `local_rank` names: cuda:LOCAL_RANK, as torchrun's ranks take theirs.
// FailedPrecondition when CUDA is asked for and libtorch sees none, or too few devices.
StatusOr<torch::Device> resolve_device(const std::string& name, int local_rank);
// FailedPrecondition when a TrainConfig dtype cannot compute on `device` (float16 needs
// CUDA: libtorch's CPU autocast is bf16 only). TrainConfig::validate refuses `device:
// cpu` with float16; this covers `auto` once resolved.
Status check_dtype_on_device(const std::string& dtype, const torch::Device& device);
// Makes `device` this process's current CUDA device (NCCL's groups and the caching
// allocator use it). REQUIRES: device.is_cuda().
void set_current_device(const torch::Device& device);

// The options of a run from its validated configuration (the resolved config included).
// REQUIRES: config.validate() passed.
TrainOptions train_options(const TrainConfig& config);

struct TrainSummary {
  int first_step = 0;               // 0, or the resumed step
  std::vector<double> losses;       // per step run
  double mean_iteration_s = 0;      // over the steps run, excluding the first
  double median_iteration_s = 0;    // the same steps' median (robust to a noisy machine)
  double tokens_per_s = 0;
  // With measure_memory, per stage (its first replica), over the steps after the first:
  // live tensor bytes when a step starts (parameters, gradients, optimizer state) and
  // the peak during a step (that plus the in-flight activations and workspace).
  std::vector<double> base_bytes, peak_bytes;
  std::vector<std::pair<int, double>> val_losses;  // (steps done, validation loss)
  std::vector<CheckpointTiming> checkpoints;       // this rank's, per checkpoint saved
  int stopped_at = -1;  // the step a stop request ended the run at (its checkpoint complete); -1: none
};

// One run per output folder: the holder has an flock on OUT/.lock, so a second run on the
// same folder is refused (FailedPrecondition) instead of interleaving metrics.jsonl. The
// kernel releases it when the process ends, however it ends. `harp train` takes it on
// rank 0 before the rendezvous.
class RunDirLock {
 public:
  static StatusOr<std::unique_ptr<RunDirLock>> take(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_;
};

// Gives this process `threads` cores for compute, without nesting two thread pools
// (measured here: 2 torch threads + 2 BLAS threads made a step 2.4x slower). float32
// products run in oneDNN (linear.h) and bf16 ones in libtorch's oneDNN, both on torch's
// OpenMP intra-op pool: torch gets the threads and OpenBLAS one. float64 (and float32 in
// a build without oneDNN) spends most of a step in OpenBLAS's gemm (Debian's libtorch has
// no MKL): BLAS gets the threads and torch's pool one.
void set_compute_threads(int threads, torch::Dtype dtype = torch::kFloat32);

// OK for a model the runtime's layers implement (families gpt, llama); FailedPrecondition naming
// the family and what works for it otherwise (the profiler asks too).
Status check_trainable(const model::ModelSpec& model);

// Checks that the plan fits the model (layer ranges cover [0, L), microbatch divisible
// by every stage's dp) and that the runtime trains its family. FailedPrecondition says
// what does not match and how to fix it.
Status check_plan_matches_model(const plan::Plan& plan, const model::ModelSpec& model);

// Runs the loop. Throws RuntimeFailure on peer failure; returns an error for I/O problems.
StatusOr<TrainSummary> train(const model::ModelSpec& model, const plan::Plan& plan, Transport& comm,
                             const TokenSource& data, const TrainOptions& options, std::ostream& log);

}  // namespace harp::runtime
