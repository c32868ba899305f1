// One timeline type and one Chrome-trace writer for predicted and measured runs: the
// simulator (sim/trace.h) and the runtime (runtime/trainer.h) both turn what they
// executed into a Timeline and write it here, so the two traces have the same
// process/thread rows, names, categories and args and open side by side in
// ui.perfetto.dev; `harp trace compare` reads both back (timeline_from_trace) and puts
// their per-stage figures side by side (compare_timelines).
//
// Rows: one pid per rank, named "stage S" (plus the subcluster, and the replica when a
// stage has several); tid 0 compute (F, B, REDUCE_GRAD, STEP), tid 1 send, tid 2 recv.
// Times in µs. Every event carries its training step (0 for a simulated iteration).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/schedule/action.h"

namespace harp::schedule {

enum class Lane { kCompute = 0, kSend = 1, kRecv = 2 };

struct TimelineEvent {
  int rank = 0;
  Action action;
  Lane lane = Lane::kCompute;
  double start_us = 0, dur_us = 0;
  int step = 0;
  int peer = -1;  // the other rank of a send or receive
  // Sends: when the send was issued and when its data arrived; -1 when unknown.
  double issued_us = -1, arrive_us = -1;
  // Computes of a predicted trace: the part of dur_us that is the stage's fixed cost per
  // call (plan::Stage::fixed_fwd_s, fixed_bwd_s; negative where the stage runs slower
  // than its layers alone); NaN when not known (a measured trace).
  double fixed_us = std::numeric_limits<double>::quiet_NaN();
};

struct TimelineRow {
  int rank = 0;
  int stage = 0;
  std::string name;  // "stage 1 (a100)", "stage 1 replica 0"
};

struct Timeline {
  std::vector<TimelineRow> rows;  // one per rank, in rank order
  std::vector<TimelineEvent> events;
};

// The row name convention above.
std::string row_name(int stage, const std::string& subcluster, int replica, int replicas);

// Chrome trace JSON: metadata rows, then events sorted by start (stable).
Json chrome_trace(const Timeline& timeline);
// Reads a trace written by chrome_trace back; InvalidArgument naming the file and the
// event index when it is not one.
StatusOr<Timeline> timeline_from_trace(const Json& trace, const std::string& file);

// Per-stage figures of a timeline, averaged over its steps (replica 0 of each stage).
struct StageFigures {
  std::string name;
  double compute_s = 0;  // F + B
  double end_s = 0;      // REDUCE_GRAD + STEP
  double wait_s = 0;     // compute lane idle right before an F or B: waiting for its input
  double idle_s = 0;     // iteration − compute − end
  // Of compute_s, the fixed cost per call; NaN: the trace does not say.
  double fixed_s = std::numeric_limits<double>::quiet_NaN();
};
struct TimelineFigures {
  int steps = 0;
  double iteration_s = 0;  // per step: last event end − first event start
  std::vector<StageFigures> stages;
};
TimelineFigures timeline_figures(const Timeline& timeline);

// Predicted against measured, per stage and for the iteration, with relative errors
// ((measured − predicted) / predicted):
//   {"iteration": {"predicted_s", "measured_s", "error"},
//    "stages": [{"stage", "name", "<figure>": {"predicted_s", "measured_s", "error"}}]}
// for figures compute, end, wait, idle; and "fixed": of compute, the predicted fixed cost
// per call ({"predicted_s"} only: a measured trace cannot tell it apart). InvalidArgument
// when the stage counts differ.
StatusOr<Json> compare_timelines(const TimelineFigures& predicted, const TimelineFigures& measured);

}  // namespace harp::schedule
