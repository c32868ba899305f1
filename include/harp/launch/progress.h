// Rank 0's progress as the elastic controller reads it: the step lines of the run
// folder's metrics.jsonl (the runtime's MetricsLog writes these keys). Each has "step"
// (0-based) and "wall_unix_s" (when the step ended); the first step of a resumed run adds
// "resumed_from_step": S, and the last step of a run stopped on request (SIGUSR1)
// "stopped_at_step": S (its checkpoint is written after the line; the run exits 0 only
// once it is complete).
#pragma once

#include <string>

namespace harp::launch {

inline constexpr const char* kProgressWallKey = "wall_unix_s";
inline constexpr const char* kProgressResumedKey = "resumed_from_step";
inline constexpr const char* kProgressStoppedKey = "stopped_at_step";

struct RunProgress {
  int steps_done = -1;          // after the last step recorded; -1: none
  int resumed_step = -1;        // the checkpoint the run resumed from; -1: none
  int stopped_step = -1;        // the step a stop request ended it at; -1: not stopped
  double first_step_unix = -1;  // when the first step recorded ended; -1: none
};

// What OUT/metrics.jsonl records at or after `since_unix` (an earlier attempt's records
// are before it). A missing file, or a line that is not a record, reads as nothing.
RunProgress read_progress(const std::string& out_dir, double since_unix);

}  // namespace harp::launch
