// The measured proof's self-check (run_check.h).
#include "harp/sim/run_check.h"

#include <cmath>
#include <cstdio>

namespace harp::sim {
namespace {

std::string fmt(const char* format, double a, double b) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, a, b);
  return buf;
}

}  // namespace

Status check_runs(const std::vector<RunRow>& rows, const RunCheck& check) {
  std::string broken;
  auto add = [&](const std::string& what) { broken += (broken.empty() ? "" : "; ") + what; };
  if (!check.subject.empty()) {
    const RunRow* subject = nullptr;
    for (const RunRow& r : rows)
      if (r.name == check.subject) subject = &r;
    if (subject == nullptr) return invalid_argument("--check " + check.subject + ": no run of that name");
    int baselines = 0;
    for (const RunRow& r : rows) {
      if (&r == subject || r.strategy == subject->strategy || r.schedule != r.planned_schedule) continue;
      ++baselines;
      const double speedup = r.measured_s / subject->measured_s;
      if (!(speedup >= check.min_speedup))
        add(subject->name + " over " + r.name + ": " + fmt("%.2fx measured, below the required %.2fx", speedup,
                                                          check.min_speedup));
    }
    if (baselines == 0)
      return invalid_argument("--check " + check.subject +
                              ": no baseline among the runs (a run of another strategy under its own schedule)");
  }
  if (check.max_error > 0)
    for (const RunRow& r : rows)
      if (!(std::abs(r.error()) <= check.max_error))
        add(r.name + ": " + fmt("predicted %+.1f%% off its measurement, beyond ±%.0f%%", 100 * r.error(),
                                100 * check.max_error));
  if (!broken.empty()) return failed_precondition("the measured proof does not hold: " + broken);
  return Status();
}

}  // namespace harp::sim
