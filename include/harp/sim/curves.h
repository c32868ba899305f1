// Training curves from runs' metrics.jsonl (harp train): loss, validation loss, tokens/s
// and iteration time against step, one line per run on shared axes (`harp trace runs DIR...
// --svg FILE`; the demo writes one). Torch-free.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "harp/common/status.h"

namespace harp::sim {

struct RunCurves {
  std::string name;  // the run folder's name
  // (step, value) points, in the file's order: training loss and validation loss (after
  // `eval_after_steps` steps), tokens/s and iteration time in ms (rank 0's step lines).
  std::vector<std::pair<double, double>> loss, val_loss, tokens_per_s, iteration_ms;
};

// DIR/metrics.jsonl: every line a JSON object; lines that are neither a step nor a
// validation record are skipped. An error names the file and the line.
StatusOr<RunCurves> load_curves(const std::string& dir);

// Four panels (loss, validation loss, tokens/s, iteration time), a line per run.
std::string curves_svg(const std::vector<RunCurves>& runs, const std::string& title);

}  // namespace harp::sim
