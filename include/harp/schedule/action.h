// The schedule IR (DESIGN.md, docs/schedule_format.md): per-rank ordered action lists.
// One rank per pipeline stage here; the dp replicas of a stage run the same list.
// Text form (PyTorch pipelining's): `2F5`, `2B5`, `2SEND_F5`, `3RECV_F5`, `2SEND_B5`,
// `1RECV_B5`, `2REDUCE_GRAD`, `2STEP`: stage, kind, microbatch (none for the last two).
// A split backward (zero-bubble schedules) runs `2I5`, the input gradient, which the
// previous stage waits for and which is sent like a B, then later `2W5`, the weight
// gradients, which nobody waits for; a stage runs either B or I and W per microbatch.
#pragma once

#include <string>
#include <vector>

#include "harp/common/status.h"

namespace harp::schedule {

// kI and kW come last so that older code indexing by kind up to kStep stays valid.
enum class ActionKind { kF, kB, kSendF, kRecvF, kSendB, kRecvB, kReduceGrad, kStep, kI, kW };
inline constexpr int kNumActionKinds = static_cast<int>(ActionKind::kW) + 1;

struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::kF;
  int microbatch = -1;  // -1 for kReduceGrad and kStep

  bool is_compute() const {
    return kind == ActionKind::kF || kind == ActionKind::kB || kind == ActionKind::kI || kind == ActionKind::kW;
  }
  // B or I: the backward that needs the next stage's gradient and sends one upstream.
  bool is_input_backward() const { return kind == ActionKind::kB || kind == ActionKind::kI; }
  bool is_send() const { return kind == ActionKind::kSendF || kind == ActionKind::kSendB; }
  bool is_recv() const { return kind == ActionKind::kRecvF || kind == ActionKind::kRecvB; }
  bool operator==(const Action& o) const {
    return stage == o.stage && kind == o.kind && microbatch == o.microbatch;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

const char* action_kind_name(ActionKind kind);  // "F", "SEND_F", "REDUCE_GRAD", ...
std::string to_string(const Action& a);
// The text form without its stage prefix ("F5", "SEND_B3", "STEP"), for traces where the
// process already names the stage.
std::string short_name(const Action& a);
// Parses the text form; InvalidArgument naming the token on failure.
StatusOr<Action> parse_action(const std::string& text);

// A schedule: actions[r] is rank r's list. compute-only (generators) or lowered
// (with SEND/RECV, REDUCE_GRAD and STEP; lowering.h).
struct Schedule {
  int num_stages = 0;
  int num_microbatches = 0;
  std::vector<std::vector<Action>> actions;

  size_t total_actions() const;
};

// One line per rank: "rank 0: 0F0 0F1 0B0 ..." (round-trips through parse_schedule_text).
std::string schedule_to_text(const Schedule& s);
// Parses the text form above. Stage count = number of lines; microbatch count = 1 +
// largest microbatch seen.
StatusOr<Schedule> parse_schedule_text(const std::string& text);

}  // namespace harp::schedule
