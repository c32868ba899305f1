// The validator: proves that a lowered schedule drains, or reports why not.
//
// Model (the strict, NCCL-like one; docs/schedule_format.md):
// - each rank executes its list in order, one action per step at most;
// - channels are per (sender, receiver, direction); the k-th send on a channel matches
//   the k-th receive (FIFO, no tags); a mismatch of microbatch is an error;
// - kRendezvous: a SEND blocks until its RECV is posted and a RECV blocks until its
//   SEND is posted (strictest); kAsyncSends: sends never block, RECV never blocks;
// - F(m) on stage s > 0 needs RECV_F(m) posted earlier on this rank and its data sent;
//   B(m) needs F(m) done and, on s < S-1, RECV_B(m) posted earlier and its data sent;
// - each stage runs M forwards and M backwards, REDUCE_GRAD after its last backward,
//   STEP after REDUCE_GRAD.
// Also reports the largest number of in-flight microbatches per rank.
#pragma once

#include <string>
#include <vector>

#include "harp/schedule/action.h"

namespace harp::schedule {

enum class SendMode { kRendezvous, kAsyncSends };

struct ValidationResult {
  bool ok = false;
  std::string error;              // first problem, with the step × rank grid for deadlocks
  int steps = 0;                  // steps until drained (or until stuck)
  std::vector<int> peak_inflight; // per rank: max F done minus B done
};

ValidationResult validate(const Schedule& lowered, SendMode mode = SendMode::kRendezvous);

// Checks a compute-only schedule: M F and M B per stage, F(m) before B(m), nothing else.
ValidationResult validate_compute(const Schedule& compute);

}  // namespace harp::schedule
