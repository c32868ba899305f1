// Runs every rank of a plan as a thread of this process (Gloo over an in-process
// HashStore), the way gloo's own tests do; collects what the tests compare.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harp/plan/plan.h"
#include "harp/runtime/exec/executor.h"
#include "harp/runtime/comm/mem_transport.h"
#include "harp/runtime/trainer.h"

namespace harp::testing {

struct RankRun {
  std::vector<double> losses;  // rank 0's view (every rank agrees)
  std::vector<double> grad_norms;  // the same
  // Per step, the most host synchronisations any rank made (StepResult::host_syncs;
  // run_plan_in_memory only).
  std::vector<std::int64_t> host_syncs;
  // dp replica 0 of every stage: global names, full tensors (tp shards gathered); grads
  // of the last step as its update left them (unscaled and clipped: AdamW::step).
  std::vector<std::pair<std::string, torch::Tensor>> params, grads;
};

// Executes `steps` steps of `plan` with thread ranks. Fails the calling test (and
// returns what it has) if a rank throws.
RankRun run_plan_threads(const model::ModelSpec& model, const plan::Plan& plan,
                         const runtime::TokenSource& data, int steps, const runtime::ExecConfig& config);

// Executes `steps` steps with thread ranks over the in-memory transport, which injects
// `faults` and keeps `rules` (mem_transport.h); returns each rank's error ("" when it
// finished), and rank 0's losses and every rank's host synchronisations in `out` when it
// finished.
std::vector<std::string> run_plan_in_memory(const model::ModelSpec& model, const plan::Plan& plan,
                                            const runtime::TokenSource& data, int steps,
                                            const runtime::ExecConfig& config, std::vector<runtime::Fault> faults,
                                            std::chrono::milliseconds timeout, RankRun* out,
                                            runtime::MemNetwork::Rules rules = runtime::MemNetwork::Rules::kBuffered);

// Runs runtime::train on every rank as threads; returns rank 0's summary.
runtime::TrainSummary train_threads(const model::ModelSpec& model, const plan::Plan& plan,
                                    const runtime::TokenSource& data, const runtime::TrainOptions& options);

// The same over the in-memory transport `net` (its faults and transit; net's world must
// be the plan's).
runtime::TrainSummary train_in_memory(const model::ModelSpec& model, const plan::Plan& plan,
                                      const runtime::TokenSource& data, const runtime::TrainOptions& options,
                                      runtime::MemNetwork& net);

// The same, returning each rank's error ("" when it finished) instead of failing.
std::vector<std::string> train_threads_errors(const model::ModelSpec& model, const plan::Plan& plan,
                                              const runtime::TokenSource& data, const runtime::TrainOptions& options);

// A plan over `model` with the given stage boundaries (layer indices where stages start,
// after 0), dp per stage, microbatches, microbatch size, schedule and launch counts
// (empty: the schedule's own), and tp per stage (empty: 1).
plan::Plan make_plan(const model::ModelSpec& model, const std::vector<int>& cuts, const std::vector<int>& dp,
                     int microbatches, int microbatch_size, plan::ScheduleKind kind,
                     const std::vector<int>& launch_counts = {}, const std::vector<int>& tp = {});

// The equivalence and resume tests' model: three blocks, enough layers for uneven 3- and
// 4-stage cuts. GPT tied, LLaMA untied with grouped-query attention; "lineage" is that
// LLaMA with every part of its lineage at once (q/k/v biases, q/k norm, head_dim 12,
// a sliding window of 5, rope scaling llama3, norm eps 1e-6).
model::ModelSpec three_block_model(int k, const std::string& family = "gpt", int vocab = 64);

// Their optimizer. AdamW turns a gradient's rounding noise into an update of up to lr
// where v is tiny, so a float32 comparison needs a modest rate (1e-2 showed 5e-5
// differences); the clip is small enough that clipping happens, so the global norm must
// be right.
runtime::OptimConfig equivalence_optim();
// The equivalence tests' run: seed 11, `dtype`, equivalence_optim().
runtime::ExecConfig equivalence_config(torch::Dtype dtype);

}  // namespace harp::testing
