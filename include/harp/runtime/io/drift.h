// Drift detection (the first half of re-planning on drift): each stage's measured compute
// per microbatch (forward + backward, reduced over the ranks after every step, so every
// rank sees the same figures and reaches the same verdict) against the run's own
// baseline. The baseline is each stage's median over the first `window` steps after the
// first (which holds the warm-up). The run has drifted when the slowest stage's median
// over the last `window` steps (the bound on the pipeline's period, the closed form's
// P = max t_i) is more than `threshold` x its baseline (slower) or less than baseline /
// threshold (a drift that ended: faster again), or when a stage that is (or becomes) at
// least half the bound moves by that much: such a stage's change is one a re-plan can use
// (a stage that was the bound and recovers under a plan made for its drift hands the bound
// to another stage, yet the old plan would be faster again). The stage whose own median
// moved the most names it. A stage far below the bound is not judged: a sub-millisecond
// stage measured here swung 1.5x from step to step beside a 3 ms one, and judged stage by
// stage made nine drifts of a run with one. The run's own figures, not the plan's,
// are the reference: an analytic plan is off by its model's error on every step (tens of
// percent on a CPU), which would read as drift from the first. A drift is reported once,
// then every stage's baseline moves to the new level, so a stage that stays slow is not
// reported again and one that recovers is. Medians over a window make single slow steps (a
// checkpoint write, a validation) no drift.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace harp::runtime {

struct DriftConfig {
  double threshold = 0;  // > 1; 0: off
  int window = 5;        // steps, >= 1
};

struct Drift {
  int step = 0;          // the step (0-based) whose figures made the verdict
  int stage = 0;
  double ratio = 1;      // measured / baseline: > 1 slower, < 1 faster (a drift that ended)
  double baseline_s = 0, measured_s = 0;  // per microbatch
  // Every stage's measured / baseline at the verdict, 1 for a stage far below the bound
  // (not judged); the re-planner scales each drifted stage's subcluster by it
  // (launch/elastic.h).
  std::vector<double> stage_ratios;
  // Every stage's level at the verdict and its baseline (seconds per microbatch, forward +
  // backward): what the re-planner calibrates the costs to.
  std::vector<double> stage_measured_s, stage_baseline_s;
};

class DriftDetector {
 public:
  DriftDetector(int stages, DriftConfig config) : config_(config), history_(static_cast<size_t>(stages)) {}
  // One step's compute per microbatch of every stage; the drift it completes, if any (the
  // stage whose ratio is farthest from 1 when several drift at once).
  std::optional<Drift> observe(int step, const std::vector<double>& stage_compute_s);

 private:
  DriftConfig config_;
  int seen_ = 0;
  std::vector<std::vector<double>> history_;  // per stage, the steps after the first
  std::vector<double> baseline_;
};

}  // namespace harp::runtime
