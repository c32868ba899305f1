// The single-process oracle: all layers in one process, gradient accumulation over the
// microbatches in order, tied-embedding gradients summed, global-norm clipping, AdamW.
// Deliberately plain: no communication, no schedule, no overlap.
#include "reference/single_process_trainer.h"

#include <cmath>

#include "harp/common/check.h"
#include "harp/runtime/nn/gpt.h"

namespace harp::testing {

ReferenceRun train_reference(const model::ModelSpec& model, const runtime::TokenSource& data,
                             std::uint64_t seed, int steps, int microbatches, int microbatch_size,
                             const runtime::OptimConfig& optim, torch::Dtype dtype) {
  const int num_layers = model.num_layers();
  const int seq_len = model.gpt.seq_len;
  auto layers = runtime::build_gpt_layers(model, 0, num_layers, seed, runtime::param_dtype(dtype), torch::kCPU);
  const auto params = runtime::named_parameters(layers);
  runtime::AdamW adamw(params, optim);

  // The tied pair is two tensors holding one parameter: the norm counts it once.
  const bool tied = model.gpt.tied_embeddings;
  torch::Tensor head_tied = layers.front()->tied_weight();
  torch::Tensor tail_tied = layers.back()->tied_weight();
  std::vector<bool> count(params.size(), true);
  for (size_t i = 0; i < params.size(); ++i) {
    if (tied && params[i].second.is_same(tail_tied)) count[i] = false;
  }

  const double global_tokens = static_cast<double>(microbatches) * microbatch_size * seq_len;
  ReferenceRun run;
  for (int step = 0; step < steps; ++step) {
    adamw.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < microbatches; ++m) {
      auto tokens = runtime::sample_tokens(data, seed, step, m * microbatch_size,
                                           microbatch_size, seq_len);
      auto inputs = tokens.narrow(1, 0, seq_len);
      auto targets = tokens.narrow(1, 1, seq_len);
      torch::Tensor loss;
      {
        runtime::AutocastGuard autocast(dtype == torch::kBFloat16);  // bf16: fp32 weights, bf16 compute
        torch::Tensor x = layers[0]->forward(inputs);
        for (int i = 1; i + 1 < num_layers; ++i) x = layers[i]->forward(x);
        loss = layers.back()->forward(x, targets);
      }
      (loss / global_tokens).backward();
      loss_sum += loss.item<double>();
    }
    if (tied) {
      torch::NoGradGuard no_grad;
      auto sum = head_tied.grad() + tail_tied.grad();
      head_tied.mutable_grad().copy_(sum);
      tail_tied.mutable_grad().copy_(sum);
    }
    run.losses.push_back(loss_sum / global_tokens);
    const double norm = std::sqrt(adamw.grad_squared_norm(count).item<double>());
    run.grad_norms.push_back(norm);
    adamw.step(step, adamw.clip_scale(norm));
    if (step + 1 == steps) {  // as the update left them: clipped (AdamW::step)
      run.grads.clear();
      for (const auto& [name, p] : params) run.grads.emplace_back(name, p.grad().clone());
    }
  }
  for (const auto& [name, p] : params) run.params.emplace_back(name, p.detach().clone());
  return run;
}

}  // namespace harp::testing
