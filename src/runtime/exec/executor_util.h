// Small helpers the executor's files share (executor.cc, executor_update.cc).
#pragma once

#include <string>
#include <vector>

#include "harp/runtime/comm/transport.h"
#include "harp/runtime/nn/gpt.h"

namespace harp::runtime {

// "rank R (stage S) at step N": the start of every failure message of the executor.
inline std::string where(const RankLayout& l, int step) {
  return "rank " + std::to_string(l.rank) + " (stage " + std::to_string(l.stage) + ") at step " +
         std::to_string(step);
}

// Whether this rank's layers begin with the embedding or end with the LM head's loss.
inline bool has_head(const std::vector<GptLayer>& layers) {
  return !layers.empty() && layers.front()->layer().kind == model::LayerKind::kHead;
}
inline bool has_tail(const std::vector<GptLayer>& layers) {
  return !layers.empty() && layers.back()->layer().kind == model::LayerKind::kTail;
}

}  // namespace harp::runtime
