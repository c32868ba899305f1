// What a training run reports: one JSON line per step in OUT/metrics.jsonl (rank 0; its
// progress records, launch/progress.h, are among them),
// a progress line per step, and the plan re-timed with the measured compute
// (OUT/measured_plan.json) so `harp simulate` on it predicts this machine.
#pragma once

#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"
#include "harp/runtime/io/drift.h"

namespace harp::runtime {

// A link probe (TrainOptions::link_probe_every): between the first ranks of two stages on
// subclusters a and b that no link of the plan joins, the transit of `bytes` (half a round
// trip; 0 until measured).
struct LinkProbe {
  int from_stage = 0, to_stage = 0;
  std::string a, b;
  double bytes = 0, transit_s = 0;
};

// The probes a plan needs: one per pair of subclusters that two of its stages run on and
// no two consecutive stages join, between the first such stages; of the bytes the plan
// sends across a cut (the first stage's comm_bytes, else a microbatch's activation in
// float32).
std::vector<LinkProbe> idle_links(const model::ModelSpec& model, const plan::Plan& plan);

struct StepMetrics {
  int step = 0;                       // 0-based
  int total_steps = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double iteration_s = 0;
  double tokens = 0, flops = 0;       // per step, for tokens/s and TFLOP/s
  std::vector<double> busy_fraction;  // per stage
  std::vector<double> link_s;         // per link between stages: transit of one message (drift.h)
  std::vector<LinkProbe> link_probes; // on a probing step
  // Model FLOPs utilisation (cost/utilisation.h): the whole run's against the sum of its
  // devices' peaks, and each stage's against its own devices'; empty and 0 when the plan
  // declares no peaks.
  std::vector<double> stage_mfu;
  double mfu = 0;
  double loss_scale = 0;              // dynamic loss scaling's scale (0: off)
  bool skipped = false;               // the update was skipped: the scaled gradients overflowed
  // Progress for the elastic controller (launch/progress.h): the checkpoint a resumed run
  // started from (its first step's line), the step a stop request ends the run at (the
  // line of the step before it).
  int resumed_from = -1, stopping_at = -1;
};

class MetricsLog {
 public:
  // Rank 0 writes OUT/metrics.jsonl (appending when `append`); other ranks write nothing.
  static StatusOr<MetricsLog> open(const std::string& out_dir, bool writer, bool append);
  MetricsLog(MetricsLog&&) = default;

  // Writes the JSON line and, with `progress`, the progress line to `log`.
  void write(const StepMetrics& m, bool progress, std::ostream& log);
  // A validation result after `steps_done` steps: the line {"eval_after_steps": n,
  // "val_loss": x} and, with `progress`, "validation after n steps: loss x".
  void write_eval(int steps_done, double val_loss, bool progress, std::ostream& log);
  // A sample's text after `steps_done` steps: {"sample_after_steps": n, "sample": text}.
  void write_sample(int steps_done, const std::string& text);
  // A drift (drift.h): {"drift_after_steps": n, "stage", "link", "ratio", "baseline_s",
  // "measured_s", "stage_ratios", "stage_measured_s", "stage_baseline_s", "link_ratios",
  // "link_measured_s", "link_baseline_s", "wall_unix_s"}.
  void write_drift(const Drift& d);

 private:
  MetricsLog() = default;
  std::ofstream file_;
  bool writer_ = false;
};

// Model FLOPs utilisation at `iteration_s` per step: each stage's (its layers' model FLOPs
// over its dp x tp devices at its declared peak_tflops) and the whole plan's (all model
// FLOPs over the sum of every device's peak). Empty and 0 when a stage declares no peak.
struct Utilisation {
  std::vector<double> stages;
  double overall = 0;
};
Utilisation plan_utilisation(const model::ModelSpec& model, const plan::Plan& plan, double iteration_s);

// The plan with each stage's measured forward and backward time per microbatch (its
// slowest replica's, as a plan's stage times are); link and end-of-step terms zeroed
// (loopback transfers take microseconds), cost_source "measured", prediction recomputed.
// A mixed stage's replica_compute_s become `replica_compute_s[stage]` (each replica's
// measured forward + backward) when given for each of its replicas.
plan::Plan measured_plan(const plan::Plan& plan, const std::vector<double>& fwd_s, const std::vector<double>& bwd_s,
                         const std::vector<std::vector<double>>& replica_compute_s = {});

}  // namespace harp::runtime
