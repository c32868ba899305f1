// Discrete-event simulator of a lowered schedule (DESIGN.md, Simulator).
//
// Integer nanoseconds, deterministic (events at the same time run in insertion order).
// Each rank executes its action list in order. F and B take the stage's fwd_s / bwd_s,
// a split backward's I bwd_s − bwd_weight_s and its W bwd_weight_s;
// a compute waits until its input has arrived. RECV is a post and takes no time. SEND
// is asynchronous: the transfer queues on its link direction (one direction per stage
// boundary and direction, links are full duplex), occupies it for comm_s − latency and
// arrives latency later. REDUCE_GRAD takes allreduce_s. STEP waits until every rank
// with a STEP has reached it, plus step_sync_s (the runtime's all-ranks reduction of the
// gradient norm and loss, which every stage waits in for the slowest), then takes
// optimizer_s; its span starts when the rank reached it. The iteration ends step_sync_s
// after the last rank finishes (the runtime's per-step metrics reduction).
// Not modelled: compute/communication interference on a device, bandwidth sharing
// between different boundaries (each boundary has its own link), dp replicas (a stage
// runs as one rank), jitter.
#pragma once

#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/common/units.h"
#include "harp/plan/plan.h"
#include "harp/schedule/action.h"

namespace harp::sim {

// One executed action, for traces and pictures.
struct Span {
  int rank = 0;
  schedule::Action action;
  Nanos start_ns = 0, end_ns = 0;
  // For sends: when the transfer occupies the link and when it arrives. For receives,
  // arrive_ns is when the data arrived (start_ns if it never did).
  Nanos link_start_ns = 0, link_end_ns = 0, arrive_ns = 0;
};

struct RankStats {
  Nanos busy_ns = 0;         // F + B + REDUCE_GRAD + STEP time
  Nanos compute_ns = 0;      // F + B only
  Nanos finish_ns = 0;       // end of the rank's last action
  int peak_inflight = 0;     // max F done − B (or I) done
  int peak_held = 0;         // max F done − B (or W) done: what a split backward still holds
  // static + the most held at once: forwards awaiting their B or I x activation_bytes,
  // Is awaiting their W x weight_grad_bytes (schedule::peak_held_bytes).
  Bytes peak_memory_bytes = 0;
};

struct SimResult {
  Nanos iteration_ns = 0;    // when the last rank finishes
  double bubble_fraction = 0;  // 1 − Σ compute / (ranks × iteration)
  std::vector<RankStats> ranks;
  std::vector<Span> spans;   // empty unless SimOptions::record_spans
  std::size_t actions_executed = 0;

  Seconds iteration_s() const { return ns_to_s(iteration_ns); }
};

struct SimOptions {
  bool record_spans = true;
};

// The cost of one all-ranks reduction of a few numbers: 2 (S − 1) × the largest boundary
// latency of the plan (0 for one stage).
Seconds step_sync_s(const plan::Plan& plan);

// Simulates `lowered` with the stage times of `plan`. Returns InvalidArgument if the
// schedule and plan disagree (stage counts), FailedPrecondition with the stuck ranks if
// the schedule cannot drain (run validate() first for a full report).
StatusOr<SimResult> simulate(const plan::Plan& plan, const schedule::Schedule& lowered,
                             const SimOptions& options = {});

}  // namespace harp::sim
