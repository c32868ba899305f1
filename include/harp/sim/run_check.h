// Training runs side by side (`harp trace runs`): each run folder's summary.json read,
// the runs in one table (predicted and measured iteration, error, speedup over a
// baseline), and the measured proof's self-check (`--check`, `make demo`): one run held
// to a required speedup over every baseline, every run to a largest prediction error.
#pragma once

#include <ostream>
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
  int stages = -1;               // -1: not given
  double error() const { return (predicted_s - measured_s) / measured_s; }
};

// DIR/summary.json of each folder (harp train writes it); InvalidArgument naming the file
// when predicted_s or measured_median_s is missing or not positive.
StatusOr<std::vector<RunRow>> load_runs(const std::vector<std::string>& dirs);

// The table, and the line saying what the speedups are over: the run named `baseline`,
// else the first uniform plan run under its own schedule. InvalidArgument for a
// `baseline` that names no run.
Status write_run_table(const std::vector<RunRow>& rows, const std::string& baseline, std::ostream& out);

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
