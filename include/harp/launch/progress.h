// Rank 0's progress as the elastic controller reads it: the step lines of the run
// folder's metrics.jsonl (the runtime's MetricsLog writes these keys). Each has "step"
// (0-based) and "wall_unix_s" (when the step ended); the first step of a resumed run adds
// "resumed_from_step": S, and the last step of a run stopped on request (SIGUSR1)
// "stopped_at_step": S (its checkpoint is written after the line; the run exits 0 only
// once it is complete). A drift record (runtime/io/drift.h) has "drift_after_steps": n,
// "stage", "ratio", "stage_ratios", "stage_measured_s", "stage_baseline_s" and "wall_unix_s".
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace harp::launch {

inline constexpr const char* kProgressWallKey = "wall_unix_s";
inline constexpr const char* kProgressResumedKey = "resumed_from_step";
inline constexpr const char* kProgressStoppedKey = "stopped_at_step";
inline constexpr const char* kProgressDriftKey = "drift_after_steps";

struct DriftRecord {
  int after_steps = 0;  // the steps done when it was judged
  int stage = 0;        // the stage that moved most; -1 when a link did
  int link = -1;        // the link (stage link -> link + 1) that moved most; -1 when a stage did
  double ratio = 1;     // its measured / baseline
  std::vector<double> stage_ratios;  // every stage's (empty from runs before they were kept)
  std::vector<double> stage_measured_s, stage_baseline_s;  // per microbatch (or empty)
  std::vector<double> link_ratios, link_measured_s, link_baseline_s;  // per message (or empty)
  double wall_unix_s = 0;
};

// A link probe's figure (runtime/io/metrics.h, LinkProbe): between subclusters a and b.
struct ProbeRecord {
  int after_steps = 0;
  std::string a, b;
  double bytes = 0, transit_s = 0;
};

struct RunProgress {
  int steps_done = -1;          // after the last step recorded; -1: none
  int resumed_step = -1;        // the checkpoint the run resumed from; -1: none
  int stopped_step = -1;        // the step a stop request ended it at; -1: not stopped
  double first_step_unix = -1;  // when the first step recorded ended; -1: none
  std::vector<std::pair<int, double>> step_s;  // (step, iteration_s) in the order recorded
  std::vector<DriftRecord> drifts;
  std::vector<ProbeRecord> probes;  // in the order recorded
};

// The median iteration_s of the records of steps in [first, last) in `p`; -1 for none.
double median_step_s(const RunProgress& p, int first, int last);

// What OUT/metrics.jsonl records at or after `since_unix` (an earlier attempt's records
// are before it). A missing file, or a line that is not a record, reads as nothing.
RunProgress read_progress(const std::string& out_dir, double since_unix);

}  // namespace harp::launch
