// The end of a step (see executor.h): the gradients' reductions (the tied embedding's
// group, the data-parallel all-reduce or ZeRO's reduce-scatter), the global norm and the
// optimizer update, and the optimizer state whole for checkpoints.
#include <cmath>

#include "harp/runtime/exec/executor.h"
#include "executor_util.h"

namespace harp::runtime {

void Executor::reduce_grads(int step) {
  const std::string what = where(layout_, step) + " in REDUCE_GRAD";
  // The tied pair (token embedding on the first stage, LM head on the last) gets one
  // summed gradient: summed locally when one rank holds both, then over the tied group.
  torch::Tensor tied_head = has_head(layers_) ? layers_.front()->tied_weight() : torch::Tensor();
  torch::Tensor tied_tail = has_tail(layers_) ? layers_.back()->tied_weight() : torch::Tensor();
  const bool tied = model_.gpt.tied_embeddings;
  if (tied && (tied_head.defined() || tied_tail.defined())) {
    // Vocabulary shards, maybe of different tp on the two stages (or whole tensors):
    // every member adds its rows into a full-size zero tensor, the sum is the whole
    // gradient, and each keeps its rows.
    const Shard* head = tied_head.defined() ? &shards_.at("embed.token.weight") : nullptr;
    const Shard* tail = tied_tail.defined() ? &shards_.at("head.lm.weight") : nullptr;
    torch::Tensor g = torch::zeros((head ? head : tail)->full_shape, (head ? tied_head : tied_tail).options());
    if (head) head->add_to(tied_head.grad(), g);
    if (tail) tail->add_to(tied_tail.grad(), g);
    comm_.allreduce_tied(g, what);
    if (head) tied_head.grad().copy_(head->take(g));
    if (tail) tied_tail.grad().copy_(tail->take(g));
  }
  if (layout_.dp() == 1) return;
  if (zero_) {
    zero_->reduce(comm_, config_.grad_reduce_dtype, what);
    return;
  }
  // One flat buffer: Gloo pays per call, and the sum is elementwise either way.
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < dp_reduced_.size(); ++i)
    if (dp_reduced_[i]) grads.push_back(optimizer_->params()[i].second.grad());
  if (grads.empty()) return;
  torch::Tensor flat = torch::cat([&] {
    std::vector<torch::Tensor> v;
    for (auto& g : grads) v.push_back(g.reshape({-1}));
    return v;
  }());
  if (config_.grad_reduce_dtype && *config_.grad_reduce_dtype != flat.scalar_type()) {  // summed in the wire dtype
    torch::Tensor wire = flat.to(*config_.grad_reduce_dtype);
    comm_.allreduce_dp(wire, what);
    flat = wire.to(flat.scalar_type());
  } else {
    comm_.allreduce_dp(flat, what);
  }
  std::int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat.slice(0, offset, offset + g.numel()).view_as(g));
    offset += g.numel();
  }
}

void Executor::apply_step(int step, StepResult* result) {
  for (Sent& s : sends_) stream_->wait(s.transfer, comm_.timeout());
  sends_.clear();
  // Global norm: each parameter once (replica 0 of each stage; the LM head copy of a
  // tied embedding is left to the token embedding), plus this rank's loss share.
  // Under ZeRO each replica counts its own chunk of the summed gradients instead.
  std::vector<bool> count;
  torch::Tensor tied_tail = has_tail(layers_) ? layers_.back()->tied_weight() : torch::Tensor();
  for (size_t i = 0; i < dp_reduced_.size(); ++i) {
    const auto& [name, p] = optimizer_->params()[i];
    count.push_back((layout_.dp_rank == 0 || (zero_ && dp_reduced_[i])) &&
                    (layout_.tp_rank == 0 || shards_.at(name).split()) &&
                    !(model_.gpt.tied_embeddings && tied_tail.defined() && p.is_same(tied_tail)));
  }
  const torch::Tensor squares = zero_ ? zero_->owned_squared_norm(count) : optimizer_->grad_squared_norm(count);
  // Every last-stage replica holds the loss of its own samples: the sum is the total.
  const torch::Tensor loss = loss_sum_.defined() ? loss_sum_ : torch::zeros_like(squares);
  // The step's one read of the device: the norm and the loss together.
  torch::Tensor shared = stream_->to_host(comm_, torch::stack({squares, loss.reshape({})}));
  comm_.allreduce_world(shared, where(layout_, step) + " in STEP");
  // With loss scaling the gradients are the scale times the true ones, exactly: so is
  // their norm. A norm that is not finite means an overflow on some rank, and every
  // rank sees the same sum: all skip the update together.
  const double squared = shared[0].item<double>();
  const double scale = scaler_.enabled() ? scaler_.scale : 1.0;
  result->loss_scale = scaler_.scale;
  result->grad_norm = std::sqrt(squared) / scale;
  result->loss = shared[1].item<double>() / global_tokens_;
  result->skipped = !scaler_.update(std::isfinite(squared));
  if (result->skipped) return;
  const double grad_scale = optimizer_->clip_scale(result->grad_norm) / scale;
  stream_->fence_copies();  // an asynchronous checkpoint still copying the parameters and moments
  if (!zero_) {
    optimizer_->step(step, grad_scale);
    return;
  }
  const std::vector<torch::Tensor> grads = zero_->step_grads();
  optimizer_->step(step, grad_scale, &grads);
  zero_->gather_params(comm_, where(layout_, step) + " gathering the updated parameters");
}

std::vector<std::pair<std::string, torch::Tensor>> Executor::whole_optimizer_state() {
  if (!zero_) return optimizer_->state();
  auto state = zero_->gather_state(comm_, *optimizer_, where(layout_, step_) + " gathering the optimizer state");
  comm_.finish_step();  // the callers read it on the host (checkpoints)
  return state;
}

}  // namespace harp::runtime
