// The slow, readable oracle for the runtime (STYLE habit 14/15): the whole GPT in one
// process, gradient accumulation over the same microbatches in the same order, the same
// AdamW. Any pipeline layout must reproduce its losses, gradients and parameters.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "harp/model/model_spec.h"
#include "harp/runtime/exec/data.h"
#include "harp/runtime/exec/optimizer.h"
#include "harp/runtime/nn/precision.h"

namespace harp::testing {

struct ReferenceRun {
  std::vector<double> losses;  // per step: mean token cross-entropy of the global batch
  std::vector<double> grad_norms;  // per step: global gradient norm before clipping
  // After the last step, global names (as runtime::named_parameters gives them).
  std::vector<std::pair<std::string, torch::Tensor>> params;
  // Gradients of the last step as its update left them: clipped (global names).
  std::vector<std::pair<std::string, torch::Tensor>> grads;
};

// Trains steps 0 .. steps-1 on batches of
// `microbatches` x `microbatch_size` samples drawn with runtime::sample_tokens. dtype
// kBFloat16: float32 weights and AdamW, the forward under bf16 autocast (precision.h).
ReferenceRun train_reference(const model::ModelSpec& model, const runtime::TokenSource& data,
                             std::uint64_t seed, int steps, int microbatches, int microbatch_size,
                             const runtime::OptimConfig& optim, torch::Dtype dtype);

}  // namespace harp::testing
