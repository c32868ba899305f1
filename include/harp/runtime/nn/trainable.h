// What the runtime's layers can train: a model's family, and a plan's fit to its model.
#pragma once

#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"

namespace harp::runtime {

// OK for a model the runtime's layers implement (families gpt, llama); FailedPrecondition naming
// the family and what works for it otherwise (the profiler asks too).
Status check_trainable(const model::ModelSpec& model);

// Checks that the plan fits the model (layer ranges cover [0, L), microbatch divisible
// by every stage's dp) and that the runtime trains its family. FailedPrecondition says
// what does not match and how to fix it.
Status check_plan_matches_model(const plan::Plan& plan, const model::ModelSpec& model);

}  // namespace harp::runtime
