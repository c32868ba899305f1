// The per-rank interpreter of lowered action lists (see executor.h for the contract).
#include "harp/runtime/exec/executor.h"

#include "executor_util.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace harp::runtime {
namespace {

constexpr int kTagsPerMicrobatch = 2;  // forward and backward direction

}  // namespace

Executor::Executor(const model::ModelSpec& model, const plan::Plan& plan, const schedule::LoweredPlan& lowered,
                   Transport& comm, const TokenSource& data, ExecConfig config)
    : model_(model),
      plan_(plan),
      comm_(comm),
      data_(&data),
      data_seed_(config.seed),
      config_(config),
      layout_(comm.layout()),
      stream_(make_compute_stream(config.device)) {
  const plan::Stage& st = plan.stages[layout_.stage];
  first_layer_ = st.first_layer;
  last_layer_ = st.last_layer;
  samples_ = layout_.samples_of(layout_.stage, layout_.dp_rank);
  sample_offset_ = layout_.first_sample(layout_.stage, layout_.dp_rank);
  global_tokens_ = static_cast<double>(plan.microbatches) * plan.microbatch_size * model.gpt.seq_len;
  scaler_.scale = config.loss_scale;
  scaler_.growth_interval = config.loss_scale_growth_interval;
  if (layout_.tp() > 1) {
    tp_ = std::make_shared<TensorParallel>();
    tp_->size = layout_.tp();
    tp_->rank = layout_.tp_rank;
    tp_->allreduce = [this](torch::Tensor& t) {
      comm_.allreduce_tp(t, where(layout_, step_) + " in a tensor-parallel all-reduce");
    };
  }
  layers_ = build_gpt_layers(model, first_layer_, last_layer_, config.seed, param_dtype(config.dtype), config.device, tp_);
  for (const auto& layer : layers_) shards_.insert(layer->shards().begin(), layer->shards().end());
  const Recompute recompute = config.recompute.value_or(st.recompute);
  if (recompute == Recompute::kSelective)
    for (auto& layer : layers_) layer->set_recompute_attention(true);
  if (recompute == Recompute::kFull)
    for (int i = 0; i < static_cast<int>(layers_.size()); ++i) {
      const model::Layer& l = layers_[i]->layer();
      const bool block = l.kind == model::LayerKind::kBlockPart;
      if (block && i > 0 && units_.back().recompute && layers_[i - 1]->layer().block == l.block)
        units_.back().end = i + 1;
      else
        units_.push_back(Unit{i, i + 1, block});
    }
  auto params = named_parameters(layers_);
  // What the data-parallel reduction sums: all but a tied embedding (its own group's).
  const bool tied = model.gpt.tied_embeddings;
  const torch::Tensor tied_head = tied && has_head(layers_) ? layers_.front()->tied_weight() : torch::Tensor();
  const torch::Tensor tied_tail = tied && has_tail(layers_) ? layers_.back()->tied_weight() : torch::Tensor();
  for (const auto& [name, p] : params)
    dp_reduced_.push_back(!((tied_head.defined() && p.is_same(tied_head)) || (tied_tail.defined() && p.is_same(tied_tail))));
  const int zero = config.zero.value_or(st.zero);
  if (zero > 0 && layout_.dp() > 1) {
    std::vector<torch::Tensor> tensors;
    for (const auto& [name, p] : params) tensors.push_back(p);
    zero_ = std::make_unique<ZeroShards>(zero, layout_.dp(), layout_.dp_rank, tensors, dp_reduced_);
  }
  optimizer_ = std::make_unique<AdamW>(std::move(params), config.optim,
                                       zero_ ? zero_->owned() : std::vector<AdamW::Range>());
  HARP_CHECK(lowered.check.ok) << lowered.require_drains().message();
  actions_ = lowered.lowered.actions[layout_.stage];
  split_backward_ = std::any_of(actions_.begin(), actions_.end(),
                                [](const schedule::Action& a) { return a.kind == schedule::ActionKind::kW; });
  stash_.resize(plan.microbatches);
  if (layout_.stage > 0) upstream_launches_ = lowered.launch_counts[layout_.stage - 1];
}

void Executor::post_ahead(int step, int forwards_done) {
  // Receives are posted ahead of the list, so that a transfer starts when its sender is
  // ready (Gloo, like NCCL, moves a payload only once its receive is posted; posted
  // where the list has them, standard 1F1B's activations waited for the receiver to
  // reach them: +30-125% waiting on the testbed, docs/testbed.md). The upstream stage
  // keeps at most N = its launch count microbatches in flight, so when it sends the
  // activation of microbatch m this rank has finished forward m - N: activations are
  // posted through forwards_done - 1 + N, N + 1 buffers at most. A gradient is posted
  // once this rank's forward of it is done, since the downstream backward needs it.
  const int M = static_cast<int>(stash_.size());
  if (layout_.stage > 0)
    for (; posted_f_upto_ < std::min(M, forwards_done + upstream_launches_); ++posted_f_upto_)
      post_recv(posted_f_upto_, true, step);
  if (forwards_done > 0 && layout_.stage + 1 < plan_.num_stages()) post_gradient_recv(forwards_done - 1, step);
}

void Executor::post_gradient_recv(int mb, int step) {
  if (posted_b_[mb]) return;
  post_recv(mb, false, step);
  posted_b_[mb] = 1;
}

std::vector<Executor::Part> Executor::peers_of(int other_stage, bool sending) const {
  std::vector<Part> parts;
  for (const RankLayout::Exchange& e :
       layout_.exchanges(layout_.stage, layout_.dp_rank, layout_.tp_rank, other_stage, sending))
    parts.push_back(Part{e.peer, e.first, e.count, {}, {}});
  return parts;
}

void Executor::post_recv(int mb, bool forward_direction, int step) {
  const int other = layout_.stage + (forward_direction ? -1 : 1);
  const int cut_layer = forward_direction ? first_layer_ - 1 : last_layer_ - 1;
  // The tensor crossing the cut: the model's output shape of the layer before it (the
  // plan's cut_shape was checked against it).
  std::vector<std::int64_t> shape = model_.layers[cut_layer].output_shape;
  std::vector<Part> parts = peers_of(other, false);
  const schedule::Action a{layout_.stage, forward_direction ? schedule::ActionKind::kRecvF : schedule::ActionKind::kRecvB, mb};
  for (Part& p : parts) {
    std::vector<std::int64_t> sizes = {p.count};
    sizes.insert(sizes.end(), shape.begin(), shape.end());
    p.buffer = torch::empty(sizes, torch::TensorOptions().dtype(config_.dtype).device(config_.device));
    p.transfer = comm_.irecv(p.buffer, p.peer, mb * kTagsPerMicrobatch + (forward_direction ? 0 : 1),
                             where(layout_, step) + " waiting for " + schedule::to_string(a) + " from rank");
  }
  (forward_direction ? stash_[mb].recv_f : stash_[mb].recv_b) = std::move(parts);
}

torch::Tensor Executor::gather(std::vector<Part>& parts, const schedule::Action& recv) {
  std::vector<torch::Tensor> pieces;
  for (Part& p : parts) {
    const ComputeStream::Mark begin = stream_->mark();
    stream_->wait(p.transfer, comm_.timeout());
    if (&p == &parts.front()) note_time(arrived_marks_, recv.kind == schedule::ActionKind::kRecvF, recv.microbatch);
    if (tracing_) waits_.push_back({recv, begin, stream_->mark(), p.peer});
    pieces.push_back(p.buffer);
  }
  torch::Tensor t = pieces.size() == 1 ? pieces[0] : torch::cat(pieces, 0);
  parts.clear();
  return t;
}

void Executor::forward(int step, int mb) {
  Stash& s = stash_[mb];
  // Waiting for the input is not compute: the clock starts once it has arrived.
  torch::Tensor x;
  if (!has_head(layers_)) {
    x = gather(s.recv_f, {layout_.stage, schedule::ActionKind::kRecvF, mb}).requires_grad_(true);
    s.input = x;
  }
  begin_compute();
  torch::Tensor tokens;
  if (has_head(layers_) || has_tail(layers_))
    tokens = sample_tokens(*data_, data_seed_, step, mb * plan_.microbatch_size + sample_offset_, samples_,
                           model_.gpt.seq_len);
  if (tokens.defined()) tokens = stream_->to_device(tokens);
  if (has_head(layers_)) x = tokens.slice(1, 0, model_.gpt.seq_len);
  if (has_tail(layers_)) s.targets = tokens.slice(1, 1, model_.gpt.seq_len + 1);
  torch::Tensor y;
  AutocastGuard autocast(config_.dtype, config_.device);
  DeferWeightGrads defer(split_backward_ ? s.wgrad.get() : nullptr);  // the linear layers' dW wait for W
  if (units_.empty() || !torch::GradMode::is_enabled()) {
    y = run_layers(0, static_cast<int>(layers_.size()), x, s.targets);
  } else {
    // Full recomputation: a leaf between units, so that each unit's backward can run on
    // its own; a recomputed unit runs without a graph now and again with one later.
    for (size_t j = 0; j < units_.size(); ++j) {
      const Unit& u = units_[j];
      torch::Tensor in = j == 0 ? x : y.detach().requires_grad_(true);
      s.unit_inputs.push_back(in);
      if (u.recompute) {
        torch::NoGradGuard no_grad;
        y = run_layers(u.begin, u.end, in, s.targets);
        s.unit_outputs.emplace_back();
      } else {
        y = run_layers(u.begin, u.end, in, s.targets);
        s.unit_outputs.push_back(y);
      }
    }
  }
  if (has_tail(layers_) && layout_.tp_rank == 0) {  // tp ranks hold the same loss
    const torch::Tensor loss = y.detach().to(torch::kFloat64);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + loss : loss.clone();  // (in float64 `loss` is y's own storage)
  }
  s.output = y;
  finish_compute();
}

torch::Tensor Executor::run_layers(int begin, int end, torch::Tensor x, const torch::Tensor& targets) {
  const int last = static_cast<int>(layers_.size()) - 1;
  for (int i = begin; i < end; ++i) {
    if (i == 0 && !has_head(layers_)) x = layers_[0]->local_cut(x);  // this tp rank's part of the cut tensor
    x = layers_[i]->layer().kind == model::LayerKind::kTail ? layers_[i]->forward(x, targets) : layers_[i]->forward(x);
    if (i == last && !has_tail(layers_)) x = layers_[i]->full_cut(x);  // the whole cut tensor, to send
  }
  return x;
}

void Executor::backward(int mb) {
  Stash& s = stash_[mb];
  torch::Tensor dy;
  if (!has_tail(layers_)) {
    dy = gather(s.recv_b, {layout_.stage, schedule::ActionKind::kRecvB, mb});  // not compute
    release_sent(mb);  // the next stage has used this microbatch's output
  }
  begin_compute();
  // A split backward's I: a recomputed unit's layers queue their weight products too.
  DeferWeightGrads defer(split_backward_ ? s.wgrad.get() : nullptr);
  // The gradient pass from `out` (the stage's output, or a unit's): the loss scaled to
  // the global batch at the tail (then by the loss scale, exactly: a power of two), else
  // the gradient received (or the next unit's).
  auto from = [&](const torch::Tensor& out, const torch::Tensor& grad) {
    if (grad.defined())
      torch::autograd::backward({out}, {grad.to(out.scalar_type())});  // a bf16 wire into a float32 output
    else if (scaler_.enabled())
      ((out / global_tokens_) * scaler_.scale).backward();
    else
      (out / global_tokens_).backward();
  };
  if (units_.empty()) {
    from(s.output, dy);
  } else {
    const int n = static_cast<int>(units_.size());
    for (int j = n - 1; j >= 0; --j) {
      const Unit& u = units_[j];
      torch::Tensor out;
      if (u.recompute) {
        AutocastGuard autocast(config_.dtype, config_.device);  // the forward's precision again
        out = run_layers(u.begin, u.end, s.unit_inputs[j], s.targets);
      } else {
        out = std::move(s.unit_outputs[j]);
      }
      from(out, j + 1 < n ? s.unit_inputs[j + 1].grad() : dy);
      if (j + 1 < n) s.unit_inputs.pop_back();  // the next unit's input and its gradient
    }
    s.unit_inputs.clear();  // the first unit's input is s.input where the stage receives one
    s.unit_outputs.clear();
  }
  s.output = torch::Tensor();
  finish_compute();
}

void Executor::weight_pass(int mb) {
  begin_compute();
  stash_[mb].wgrad->run();
  finish_compute();
}

void Executor::send(int mb, bool forward_direction) {
  Stash& s = stash_[mb];
  const int other = layout_.stage + (forward_direction ? 1 : -1);
  torch::Tensor payload = (forward_direction ? s.output.detach() : s.input.grad()).to(config_.dtype);
  const schedule::Action a{layout_.stage, forward_direction ? schedule::ActionKind::kSendF : schedule::ActionKind::kSendB, mb};
  note_time(sent_marks_, forward_direction, mb);
  for (const Part& p : peers_of(other, true)) {
    torch::Tensor slice = payload.slice(0, p.first, p.first + p.count).contiguous();
    Transfer t = comm_.isend(slice, p.peer, mb * kTagsPerMicrobatch + (forward_direction ? 0 : 1),
                             where(layout_, step_) + " sending " + schedule::to_string(a) + " to rank");
    sends_.push_back({slice, std::move(t), mb, forward_direction});
  }
  if (!forward_direction) s.input = torch::Tensor();  // the gradient has been handed over
}

void Executor::release_sent(int forward_of) {
  auto completed = [&](Sent& s) {
    if (!(s.forward && s.microbatch == forward_of) && !s.transfer.done()) return false;
    stream_->wait(s.transfer, comm_.timeout());  // done: returns at once, or reports a failed send
    return true;
  };
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(), completed), sends_.end());
}

void Executor::note_time(std::array<std::vector<ComputeStream::Mark>, 2>& marks, bool forward_direction, int mb) {
  std::vector<ComputeStream::Mark>& v = marks[forward_direction ? 0 : 1];
  if (mb < static_cast<int>(v.size()))
    v[static_cast<size_t>(mb)] = stream_->mark();  // not in evaluate() before the first step
}

void Executor::begin_compute() {
  compute_start_ = start_compute();
  compute_from_ = stream_->mark();
}

void Executor::finish_compute() {
  // An emulated slower device (emulation.h) is busy factor x what the compute needed;
  // the span and the stage's measured time include the sleep. It needs the compute's
  // host time: on a device the stream is synchronised first (only when emulating).
  const double factor =
      (config_.emulate ? plan_.stages[layout_.stage].slowdown_of(layout_.dp_rank) : 1.0) * extra_slowdown_;
  if (config_.emulate || extra_slowdown_ != 1) {
    if (!stream_->host_timed()) stream_->synchronize(comm_);
    finish_emulated_compute(compute_start_, factor);
  }
  // No synchronisation: the span's end is a mark on the stream, read at the step's end.
  // (A device-wide one here waited for the receives posted ahead on NCCL's streams, and
  // every multi-stage plan deadlocked: tests/runtime_dist/nccl_semantics_test.cc.)
  compute_to_ = stream_->mark();
}

void Executor::resolve_marks(int step, StepResult* result) {
  auto seconds = [&](ComputeStream::Mark m) { return stream_->seconds(m); };
  const double origin_us = us_since_origin(stream_->step_begin());
  auto event = [&](const Span& span, schedule::Lane lane) {
    schedule::TimelineEvent e;
    e.rank = layout_.rank;
    e.action = span.action;
    e.lane = lane;
    e.start_us = origin_us + 1e6 * seconds(span.from);
    e.dur_us = origin_us + 1e6 * seconds(span.to) - e.start_us;
    e.step = step;
    e.peer = span.peer;
    return e;
  };
  for (const Span& span : spans_) {
    if (span.action.is_compute()) {
      const double secs = seconds(span.to) - seconds(span.from);
      result->compute_seconds += secs;
      (span.action.kind == schedule::ActionKind::kF ? result->forward_seconds : result->backward_seconds) += secs;
    }
    if (tracing_) trace_.push_back(event(span, schedule::Lane::kCompute));
  }
  for (const Span& wait : waits_) trace_.push_back(event(wait, schedule::Lane::kRecv));
  for (int d = 0; d < 2; ++d) {
    result->sent_s[d].assign(stash_.size(), -1.0);
    result->arrived_s[d].assign(stash_.size(), -1.0);
    for (size_t mb = 0; mb < stash_.size(); ++mb) {
      if (sent_marks_[d][mb] >= 0) result->sent_s[d][mb] = seconds(sent_marks_[d][mb]);
      if (arrived_marks_[d][mb] >= 0) result->arrived_s[d][mb] = seconds(arrived_marks_[d][mb]);
    }
  }
}

StepResult Executor::run_step(int step, bool trace) {
  StepResult result;
  step_ = step;
  loss_sum_ = torch::Tensor();
  tracing_ = trace;
  trace_.clear();
  spans_.clear();
  waits_.clear();
  optimizer_->zero_grad();
  for (Stash& s : stash_) s.wgrad->clear();  // left over only by a step that failed
  if (trace) comm_.barrier(where(layout_, step) + " before a traced step");
  const std::int64_t syncs_before = stream_->host_syncs();
  stream_->begin_step();
  const auto begin = stream_->step_begin();
  for (auto* v : {&sent_marks_[0], &sent_marks_[1], &arrived_marks_[0], &arrived_marks_[1]})
    v->assign(stash_.size(), -1);
  if (trace && !traced_before_) {
    origin_ = config_.clock_origin_ns > 0
                  ? std::chrono::steady_clock::time_point(std::chrono::nanoseconds(config_.clock_origin_ns))
                  : begin;
    traced_before_ = true;
  }
  posted_f_upto_ = 0;
  posted_b_.assign(stash_.size(), 0);
  int forwards_done = 0;
  post_ahead(step, forwards_done);
  // Under bf16 or fp16 autocast each weight is cast once this step, for every
  // microbatch; the copies go with this scope, after STEP has updated the weights.
  AutocastCacheScope casts_once(config_.dtype);
  for (const schedule::Action& a : actions_) {
    release_sent();
    comm_.before_action(step, a);
    const bool timed_other =
        trace && (a.kind == schedule::ActionKind::kReduceGrad || a.kind == schedule::ActionKind::kStep);
    const ComputeStream::Mark start = timed_other ? stream_->mark() : 0;
    switch (a.kind) {
      case schedule::ActionKind::kRecvF:  // posted ahead (post_ahead), unless the list runs further ahead
        for (; posted_f_upto_ <= a.microbatch; ++posted_f_upto_) post_recv(posted_f_upto_, true, step);
        break;
      case schedule::ActionKind::kRecvB: post_gradient_recv(a.microbatch, step); break;
      case schedule::ActionKind::kF:
        forward(step, a.microbatch);
        post_ahead(step, ++forwards_done);
        break;
      case schedule::ActionKind::kB:
      case schedule::ActionKind::kI: backward(a.microbatch); break;
      case schedule::ActionKind::kW: weight_pass(a.microbatch); break;
      case schedule::ActionKind::kSendF: send(a.microbatch, true); break;
      case schedule::ActionKind::kSendB: send(a.microbatch, false); break;
      case schedule::ActionKind::kReduceGrad: reduce_grads(step); break;
      case schedule::ActionKind::kStep: apply_step(step, &result); break;
    }
    // Compute spans exclude the wait for their input, as in the simulator's trace.
    if (a.is_compute()) spans_.push_back({a, compute_from_, compute_to_});
    if (timed_other) spans_.push_back({a, start, stream_->mark()});
  }
  // The step ends when its work on the device is done; then the marks can be read.
  stream_->synchronize(comm_);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  resolve_marks(step, &result);
  result.host_syncs = stream_->host_syncs() - syncs_before;
  return result;
}

double Executor::evaluate(const TokenSource& source, int batch) {
  torch::NoGradGuard no_grad;
  const TokenSource* training = data_;
  data_ = &source;
  data_seed_ = config_.seed ^ 0x5eedeba1ULL;  // the evaluation's own sample stream
  step_ = batch;
  loss_sum_ = torch::Tensor();
  stream_->begin_step();
  for (const schedule::Action& a : actions_) {
    switch (a.kind) {
      case schedule::ActionKind::kRecvF: post_recv(a.microbatch, true, batch); break;
      case schedule::ActionKind::kF: forward(batch, a.microbatch); break;
      case schedule::ActionKind::kSendF: send(a.microbatch, true); break;
      default: break;  // no backward, reduction or update
    }
  }
  for (Sent& s : sends_) stream_->wait(s.transfer, comm_.timeout());
  sends_.clear();
  for (Stash& s : stash_) s.input = s.output = s.targets = torch::Tensor();
  data_ = training;
  data_seed_ = config_.seed;
  torch::Tensor shared =
      loss_sum_.defined() ? stream_->to_host(comm_, loss_sum_).reshape({1}) : torch::zeros({1}, torch::kFloat64);
  comm_.allreduce_world(shared, where(layout_, batch) + " in evaluation");
  return shared[0].item<double>() / global_tokens_;
}

const Shard& Executor::shard_of(const std::string& name) const {
  auto it = shards_.find(name);
  for (const char* suffix : {".exp_avg_sq", ".exp_avg"}) {  // optimizer state: its parameter's
    const std::string s = suffix;
    if (it == shards_.end() && name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      it = shards_.find(name.substr(0, name.size() - s.size()));
  }
  HARP_CHECK(it != shards_.end()) << "no parameter `" << name << "` on rank " << layout_.rank;
  return it->second;
}

std::vector<std::pair<std::string, torch::Tensor>> Executor::full_tensors(
    const std::vector<std::pair<std::string, torch::Tensor>>& local) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [name, t] : local) {
    const Shard& shard = shard_of(name);
    if (!shard.split()) {
      out.emplace_back(name, t);
      continue;
    }
    torch::Tensor full = torch::zeros(shard.full_shape, t.options());
    shard.add_to(t.detach(), full);
    comm_.allreduce_tp(full, where(layout_, step_) + " gathering `" + name + "`");
    out.emplace_back(name, full);
  }
  comm_.finish_step();  // the callers read them on the host (checkpoints)
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Executor::named_grads() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [name, p] : optimizer_->params()) out.emplace_back(name, p.grad());
  return out;
}

}  // namespace harp::runtime
