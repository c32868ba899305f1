// Drift detection (the first half of re-planning on drift): each stage's measured compute
// per microbatch (forward + backward) and each link's measured transit per message
// (between consecutive stages: the fastest microbatch's arrival less its send, averaged
// over the two directions so that the two ends' clocks need not agree; trainer.cc), both
// reduced over the ranks after every step, so every rank sees the same figures and reaches
// the same verdict, against the run's own baseline. Links are judged as stages are: the
// closed form's period is max(max t_i, max c_i), and "the bound" below is that maximum. The baseline is each stage's median over the first `window` steps after the
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

#include <algorithm>
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
  int stage = 0;         // the stage that moved the most; -1 when a link did
  int link = -1;         // the link (from stage `link` to `link + 1`) that did; -1 when a stage
  double ratio = 1;      // measured / baseline: > 1 slower, < 1 faster (a drift that ended)
  double baseline_s = 0, measured_s = 0;  // per microbatch
  // Every stage's measured / baseline at the verdict, 1 for a stage far below the bound
  // (not judged); the re-planner scales each drifted stage's subcluster by it
  // (launch/elastic.h).
  std::vector<double> stage_ratios;
  // Every stage's level at the verdict and its baseline (seconds per microbatch, forward +
  // backward): what the re-planner calibrates the costs to.
  std::vector<double> stage_measured_s, stage_baseline_s;
  // The same per link (transit of one message, seconds); empty when the run measured none.
  std::vector<double> link_ratios, link_measured_s, link_baseline_s;
};

class DriftDetector {
 public:
  DriftDetector(int stages, DriftConfig config)
      : config_(config), stages_(stages), history_(static_cast<size_t>(stages + std::max(0, stages - 1))) {}
  // One step's compute per microbatch of every stage and transit per message of every
  // link (empty: none measured); the drift it completes, if any (the stage or link whose
  // ratio is farthest from 1 when several drift at once).
  std::optional<Drift> observe(int step, const std::vector<double>& stage_compute_s,
                               const std::vector<double>& link_transit_s = {});

 private:
  DriftConfig config_;
  int stages_;
  int seen_ = 0;
  std::vector<std::vector<double>> history_;  // per stage, then per link: the steps after the first
  std::vector<double> baseline_;
};

}  // namespace harp::runtime
