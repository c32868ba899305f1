// Activation recomputation of a pipeline stage (docs/runtime.md, Recomputation;
// docs/cost_model.md): what a stage keeps for the backward pass between a microbatch's
// forward and its backward, and what the backward recomputes.
//   none       keep every activation (the default)
//   selective  recompute the attention core (softmax(q kᵀ) v) in the backward: its s x s
//              scores and probabilities are not kept (Korthikanti et al.'s selective)
//   full       keep only each transformer block's input; the backward reruns the block's
//              forward (Megatron's full/uniform). The embedding and the LM head are not
//              recomputed.
// Shared by the cost model, the plan file, the planner and the runtime.
#pragma once

#include <string>
#include <vector>

namespace harp {

enum class Recompute { kNone = 0, kSelective = 1, kFull = 2 };
inline constexpr int kRecomputeModes = 3;

inline const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
    default: return "none";
  }
}

// "none", "selective" or "full"; false for anything else.
inline bool parse_recompute(const std::string& name, Recompute* out) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    if (name == recompute_name(r)) {
      *out = r;
      return true;
    }
  return false;
}

// A planner's recomputation policy: "none", "selective" or "full" (every stage uses that
// mode) or "auto" (the search picks one per stage, from all three); false otherwise.
inline bool parse_recompute_policy(const std::string& name, std::vector<Recompute>* out) {
  Recompute r;
  if (name == "auto") {
    *out = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
    return true;
  }
  if (!parse_recompute(name, &r)) return false;
  *out = {r};
  return true;
}

}  // namespace harp
