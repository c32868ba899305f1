// The interpreter: one rank executes its lowered action list (the same list `harp
// simulate` costs) for one training step. Receives are posted when the list says RECV
// (an irecv) and waited for by the compute that needs them; sends are asynchronous and
// waited before their buffers go and before the step ends. Data-parallel replicas of a
// stage split each microbatch's samples; when neighbouring stages have different dp,
// each replica sends every replica of the next stage the samples they share.
//
// Recomputation (common/recompute.h): selective wraps each attention core in an autograd
// function that keeps only q, k and v and recomputes the scores in the backward (gpt.h);
// full splits the stage's layers into units, each block's layers one unit and the head
// and the tail one each, keeps only each unit's input (a leaf between units) and reruns
// a block's forward in the backward before its gradient pass. Both give the gradients
// of no recomputation bit for bit on the CPU (the same operations on the same values).
//
// Loss scaling: the tail returns the sum of token cross-entropies; backward starts from
// sum / (tokens of the global batch), so gradients add up over microbatches and replicas
// exactly as in one process with gradient accumulation.
#pragma once

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"
#include "harp/runtime/comm/transport.h"
#include "harp/runtime/exec/compute_stream.h"
#include "harp/runtime/exec/data.h"
#include "harp/runtime/exec/emulation.h"
#include "harp/runtime/exec/optimizer.h"
#include "harp/runtime/exec/zero.h"
#include "harp/runtime/nn/gpt.h"
#include "harp/runtime/nn/precision.h"
#include "harp/runtime/nn/weight_grad.h"
#include "harp/schedule/action.h"
#include "harp/schedule/lower_plan.h"
#include "harp/schedule/timeline.h"

namespace harp::runtime {

struct ExecConfig {
  std::uint64_t seed = 1234;   // weights and data
  // The compute dtype: kFloat32, kFloat64, kBFloat16 or kHalf (the last two: float32
  // master weights and state, autocast, cut tensors in that dtype: runtime/precision.h).
  torch::Dtype dtype = torch::kFloat32;
  // Where this rank's layers, activations and gradients live (CUDA: the transport must
  // be c10d's with NCCL, comm.h). Token ids are drawn on the CPU and copied over.
  torch::Device device = torch::kCPU;
  // Dynamic loss scaling's first scale (a power of two; 0: off) and growth interval
  // (precision.h).
  double loss_scale = 0;
  int loss_scale_growth_interval = 2000;
  // The data-parallel gradient all-reduce's dtype (the gradients are cast to it and
  // back); unset: the gradients' own.
  std::optional<torch::Dtype> grad_reduce_dtype;
  // Every stage's activation recomputation; unset: each stage's plan::Stage::recompute.
  std::optional<Recompute> recompute;
  // Every stage's sharding of optimizer state (0, 1 or 2: exec/zero.h); unset: each
  // stage's plan::Stage::zero.
  std::optional<int> zero;
  OptimConfig optim;
  bool emulate = false;        // apply the plan's emulated_slowdown (DESIGN.md, last section)
  // Trace times count from this steady_clock reading (ns) when > 0: ranks on one machine
  // share the clock (harp launch sets HARP_CLOCK_ORIGIN_NS), so their spans line up
  // exactly; otherwise from each rank's first traced step, after a barrier.
  std::int64_t clock_origin_ns = 0;
};

struct StepResult {
  double loss = 0;             // mean token cross-entropy of the global batch (every rank)
  double grad_norm = 0;        // global gradient norm before clipping
  double seconds = 0;          // wall time of the step on this rank
  double compute_seconds = 0;  // time in F and B (with an emulated device's sleep)
  double forward_seconds = 0, backward_seconds = 0;  // their parts (all microbatches)
  // Dynamic loss scaling: the scale this step's backward ran with, and whether its
  // gradients overflowed on some rank, so that every rank skipped the update.
  double loss_scale = 0;
  bool skipped = false;
  // Link transit (drift.h): per microbatch, seconds after this rank's step began, when it
  // began sending its first part of each cut tensor ([0] activations, [1] gradients) and
  // when its first part of each arrived (its wait returned); -1 where it sends or
  // receives none. The first parts of a stage's first replica (tp rank 0) pair with the
  // neighbouring stage's first replica, so the two ends of one message meet in the
  // metrics reduction.
  std::array<std::vector<double>, 2> sent_s, arrived_s;
  // Host synchronisations of the step (ComputeStream: the rank's stream synchronised,
  // values copied to the host): a constant, whatever the parameters and microbatches.
  std::int64_t host_syncs = 0;
};

class Executor {
 public:
  // Builds this rank's layers from the seed; runs this rank's list of `lowered`.
  // REQUIRES: layout matches plan; check_plan_matches_model (trainer.h) passed;
  // lowered = schedule::lower_plan(plan) and it drains; comm outlives the executor.
  Executor(const model::ModelSpec& model, const plan::Plan& plan,
           const schedule::LoweredPlan& lowered, Transport& comm, const TokenSource& data,
           ExecConfig config);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs training step `step` (0-based): the action list, all-reduces, optimizer step.
  // Throws RuntimeFailure when a peer fails or a wait times out.
  StepResult run_step(int step, bool trace = false);

  // Evaluation: the mean token cross-entropy of one global batch drawn from `source`
  // (batch `batch` of the evaluation stream: the same batches at every evaluation), the
  // forward half of the action list without gradients; parameters, optimizer state and
  // the training data order are untouched. Every rank returns the same value.
  double evaluate(const TokenSource& source, int batch);

  AdamW& optimizer() { return *optimizer_; }
  // The optimizer's state with whole tensors (AdamW::state() order): under ZeRO a
  // collective over the stage's data-parallel group, which every replica calls.
  std::vector<std::pair<std::string, torch::Tensor>> whole_optimizer_state();
  // This stage's ZeRO level in effect (0 when dp is 1).
  int zero_level() const { return zero_ ? zero_->level() : 0; }
  const LossScaler& loss_scaler() const { return scaler_; }
  LossScaler& loss_scaler() { return scaler_; }  // a resume restores its state
  std::uint64_t seed() const { return config_.seed; }
  const std::vector<GptLayer>& layers() const { return layers_; }
  // Named parameters and their gradients of the last step as its update left them:
  // unscaled and clipped, as PyTorch's GradScaler.unscale_ and clip_grad_norm_ leave them
  // (global names; this rank's shards under tensor parallelism). Under ZeRO the summed
  // gradients are sharded: these are this replica's own (level 1) or undefined (level 2).
  std::vector<std::pair<std::string, torch::Tensor>> named_grads() const;
  // Where a parameter (or its optimizer state "<name>.exp_avg", ".exp_avg_sq") lies in
  // its full tensor. REQUIRES: the name is this rank's.
  const Shard& shard_of(const std::string& name) const;
  // The full tensors of this rank's `local` ones (parameters, gradients, state),
  // gathered over its tensor-parallel group: a collective every tp rank of the replica
  // calls with the same names in the same order.
  std::vector<std::pair<std::string, torch::Tensor>> full_tensors(
      const std::vector<std::pair<std::string, torch::Tensor>>& local);
  const std::vector<schedule::Action>& actions() const { return actions_; }
  // Where this rank computes (an asynchronous checkpoint copies through it; the update of
  // the next STEP waits for those copies).
  ComputeStream& stream() { return *stream_; }
  // A compute slowdown on top of the plan's emulation (tests of drift detection: a
  // stage that becomes slower mid-run); 1: none.
  void set_extra_slowdown(double factor) { extra_slowdown_ = factor; }
  // The measured timeline of the traced steps so far (schedule/timeline.h): compute
  // spans exclude the wait for their input; waits for data are recv-lane events. Times
  // in µs from the first traced step's start barrier.
  std::vector<schedule::TimelineEvent> take_trace() { return std::move(trace_); }

 private:
  struct Part {  // a slice of a microbatch exchanged with one peer replica
    int peer;
    int first, count;  // sample range relative to the receiving tensor's first sample
    torch::Tensor buffer;
    Transfer transfer;
  };
  struct Stash {
    torch::Tensor input, output, targets;
    std::vector<Part> recv_f, recv_b;
    // Full recomputation: each unit's input, and the output of the units kept whole.
    std::vector<torch::Tensor> unit_inputs, unit_outputs;
    // A split backward's weight products, queued by its I for its W (nn/weight_grad.h).
    std::unique_ptr<WeightGradQueue> wgrad = std::make_unique<WeightGradQueue>();
  };
  // Full recomputation's units: layers_[begin, end), rerun in the backward or kept.
  struct Unit {
    int begin, end;
    bool recompute;
  };
  // The ranks of `other_stage` this rank sends to or receives from: the replicas that
  // share samples with this replica, at the matching tp ranks.
  std::vector<Part> peers_of(int other_stage, bool sending) const;
  void forward(int step, int mb);
  // Layers [begin, end) of this rank on `x` (the tail takes `targets`).
  torch::Tensor run_layers(int begin, int end, torch::Tensor x, const torch::Tensor& targets);
  // B, or a split backward's I (the weight products queued for weight_pass).
  void backward(int mb);
  // A split backward's W: the weight products backward(mb) queued.
  void weight_pass(int mb);
  void send(int mb, bool forward_direction);
  // Drops the sends that have completed, so that their buffers go as soon as nothing else
  // holds them rather than at the step's end (a stage kept one cut tensor per microbatch
  // per direction until then: tests/runtime_dist/schedule_memory_test.cc): those the
  // transport reports done (NCCL's events), and microbatch `forward_of`'s forward sends
  // (>= 0: its gradient has come back, so the next stage received them; Gloo reports a
  // send done only once waited). A backward send over Gloo stays to the step's end.
  void release_sent(int forward_of = -1);
  void post_recv(int mb, bool forward_direction, int step);
  // Posts the receives that may be needed before this rank's next forward (see .cc);
  // a gradient's receive once per step.
  void post_ahead(int step, int forwards_done);
  void post_gradient_recv(int mb, int step);
  // Makes compute wait for every part (a traced step records each wait as a recv-lane
  // event).
  torch::Tensor gather(std::vector<Part>& parts, const schedule::Action& recv);
  // Marks now on the stream for microbatch mb's message in `marks`.
  void note_time(std::array<std::vector<ComputeStream::Mark>, 2>& marks, bool forward_direction, int mb);
  // executor_update.cc: the step's reductions, update and the whole optimizer state.
  void reduce_grads(int step);
  void apply_step(int step, StepResult* result);
  // Starts a compute span (a mark on the stream; for an emulated device this thread's
  // clocks too), and ends it, sleeping first on an emulated device (the sleep is part of
  // the span).
  void begin_compute();
  void finish_compute();
  // The step's marks resolved (after the stream's synchronisation): each span's seconds
  // into `result`, the trace's events, the link times.
  void resolve_marks(int step, StepResult* result);

  const model::ModelSpec& model_;
  const plan::Plan& plan_;
  Transport& comm_;
  const TokenSource* data_;  // the training tokens, or the evaluation's during evaluate()
  std::uint64_t data_seed_ = 0;
  ExecConfig config_;
  double extra_slowdown_ = 1;
  RankLayout layout_;
  LossScaler scaler_;
  int first_layer_ = 0, last_layer_ = 0;
  int samples_ = 1, sample_offset_ = 0;  // this replica's share of a microbatch
  double global_tokens_ = 1;
  std::shared_ptr<TensorParallel> tp_;  // null without tensor parallelism
  std::vector<GptLayer> layers_;
  std::map<std::string, Shard> shards_;  // every parameter's, by name
  std::vector<Unit> units_;  // empty unless this stage recomputes fully
  // Per optimizer parameter: whether the data-parallel all-reduce (or ZeRO's reduce-
  // scatter) sums it; a tied embedding is summed over its own group instead.
  std::vector<bool> dp_reduced_;
  std::unique_ptr<ZeroShards> zero_;  // null unless this stage shards its optimizer state
  std::unique_ptr<AdamW> optimizer_;
  std::vector<schedule::Action> actions_;
  bool split_backward_ = false;  // the list runs I and W (a zero-bubble schedule)
  std::vector<Stash> stash_;
  // A send in flight: its buffer lives until the transfer is done (release_sent).
  struct Sent {
    torch::Tensor buffer;
    Transfer transfer;
    int microbatch = 0;
    bool forward = true;
  };
  std::vector<Sent> sends_;
  std::unique_ptr<ComputeStream> stream_;  // where this rank computes (compute_stream.h)
  // The sum of the tail's losses this step, on the device (float64; read once, at STEP).
  torch::Tensor loss_sum_;
  int step_ = 0;
  bool tracing_ = false, traced_before_ = false;
  std::chrono::steady_clock::time_point origin_;
  // This step's spans on the stream: compute (F, B, I, W), and REDUCE_GRAD and STEP when
  // tracing; waits for received data (traced steps); when each cut tensor's first part
  // was sent and arrived, by direction and microbatch (-1: none).
  struct Span {
    schedule::Action action;
    ComputeStream::Mark from, to;
    int peer = -1;  // a wait's sender
  };
  std::vector<Span> spans_, waits_;
  std::array<std::vector<ComputeStream::Mark>, 2> sent_marks_, arrived_marks_;
  ComputeStart compute_start_;  // of the last compute begun (begin_compute)
  ComputeStream::Mark compute_from_ = 0, compute_to_ = 0;
  int upstream_launches_ = 0;   // the previous stage's launch count (0 on the first stage)
  int posted_f_upto_ = 0;       // this step's activation receives posted: microbatches below it
  std::vector<char> posted_b_;  // this step's gradient receives posted, by microbatch
  std::vector<schedule::TimelineEvent> trace_;
  double us_since_origin(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  }
};

}  // namespace harp::runtime
