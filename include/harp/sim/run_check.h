// The measured proof's self-check (`harp trace runs --check`, `make demo`): training runs
// of several strategies' plans, each with its predicted and measured iteration, held to
// a required speedup of one run over every baseline and a largest prediction error.
#pragma once

#include <string>
#include <vector>

#include "harp/common/status.h"

namespace harp::sim {

// One training run, as its summary.json gives it.
struct RunRow {
  std::string name;              // the run folder's last part
  std::string strategy;          // harp, homogeneous, uniform, ...
  std::string schedule;          // the schedule it ran
  std::string planned_schedule;  // the schedule its plan was made for
  double predicted_s = 0, measured_s = 0;
  double error() const { return (predicted_s - measured_s) / measured_s; }
};

struct RunCheck {
  std::string subject;      // the run that must win (by name); empty: no speedup check
  double min_speedup = 0;   // over every baseline: a run of another strategy under its own schedule
  double max_error = 0;     // |predicted − measured| / measured of every run; 0: unchecked
};

// OK when every rule holds. Otherwise FailedPrecondition naming each row that broke a
// rule, with its figure and the bound (one line, rows separated by "; "); InvalidArgument
// when the subject is not among the rows or it has no baseline to beat.
Status check_runs(const std::vector<RunRow>& rows, const RunCheck& check);

}  // namespace harp::sim
