// The training loop of one rank: steps of the plan's schedule, metrics (JSONL, one line
// per step, written by rank 0), a progress line, Chrome traces of chosen steps (the
// simulator's format, so predicted and measured timelines open side by side), the plan
// re-timed with measured compute (measured_plan.json), atomic checksummed checkpoints
// every K steps and exact resume.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/config/train_config.h"
#include "harp/data/tokenizer.h"
#include "harp/runtime/exec/executor.h"
#include "harp/runtime/io/checkpoint_writer.h"
#include "harp/runtime/io/drift.h"

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
  // Samples (generate.h): every `sample_every` steps and after the last, each stage's
  // first replica writes its parameters to OUT/sample/ and rank 0 generates
  // `sample_tokens` tokens after `sample_prompt` on the CPU (temperature 1, seeded by the
  // run's seed and the step) and prints them. Off when sample_tokenizer is null or
  // sample_every is 0.
  const data::Tokenizer* sample_tokenizer = nullptr;
  int sample_every = 0;
  std::string sample_prompt;
  int sample_tokens = 64;
  // Drift detection (io/drift.h): a stage whose compute leaves its baseline by more
  // than drift.threshold x is reported (a line, a metrics.jsonl record, TrainSummary).
  DriftConfig drift;
  // Every this many steps (0: never) the first ranks of two stages on different
  // subclusters that no link of the plan joins send a cut-sized message there and back
  // (Transport::round_trip), so that a link the plan routes around is still measured; the
  // transit (half the round trip) goes to metrics.jsonl's `link_probes`.
  int link_probe_every = 0;
  // Tests: a compute slowdown of (step, stage), applied on top of any emulation.
  std::function<double(int step, int stage)> fake_slowdown;
  // A file read before every step whose number (>= 1) slows this rank's compute on top
  // of any emulation (launch::testbed_slowdown_file: `harp testbed set
  // --device-slowdown`); "" or no file: none.
  std::string slowdown_file;
};

// The options of a run from its validated configuration (the resolved config included).
// REQUIRES: config.validate() passed.
TrainOptions train_options(const config::TrainConfig& config);

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
  // The most the device's allocator held at once (CUDA: allocated and cached, as
  // torch.cuda.max_memory_reserved; the CPU: peak_bytes).
  std::vector<double> reserved_bytes;
  // The smallest of the base bytes: the training state alone (a step may begin while
  // Gloo still holds a finished transfer's tensors, released from its own thread).
  std::vector<double> state_bytes;
  std::vector<std::pair<int, double>> val_losses;  // (steps done, validation loss)
  std::vector<CheckpointTiming> checkpoints;       // this rank's, per checkpoint saved
  int stopped_at = -1;  // the step a stop request ended the run at (its checkpoint complete); -1: none
  std::vector<Drift> drifts;  // every drift detected, in order
};

// Runs the loop. Throws RuntimeFailure on peer failure; returns an error for I/O problems.
StatusOr<TrainSummary> train(const model::ModelSpec& model, const plan::Plan& plan, Transport& comm,
                             const TokenSource& data, const TrainOptions& options, std::ostream& log);

}  // namespace harp::runtime
