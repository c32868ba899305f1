// The measured proof's self-check (run_check.h).
#include "harp/sim/run_check.h"

#include <cmath>
#include <filesystem>

#include "harp/common/document.h"
#include "harp/common/fields.h"
#include "harp/common/format.h"
#include "harp/common/quantities.h"
#include "harp/common/table.h"

namespace harp::sim {
namespace {

// A summary's optional text field, "-" when it is missing or not text.
std::string text_of(const Json& s, const char* key) {
  return s.contains(key) && s[key].is_string() ? s[key].get<std::string>() : std::string("-");
}

}  // namespace

StatusOr<std::vector<RunRow>> load_runs(const std::vector<std::string>& dirs) {
  std::vector<RunRow> rows;
  for (const std::string& dir : dirs) {
    const std::string file = dir + "/summary.json";
    HARP_ASSIGN_OR_RETURN(Json s, load_document(file));
    for (const char* key : {"predicted_s", "measured_median_s"})
      if (!s.contains(key) || !s[key].is_number() || !in_range(quantity::kPositiveSeconds, s[key].get<double>()))
        return invalid_argument(shown_path(file) + ": " + key + " is missing or not a time " +
                                range_text(quantity::kPositiveSeconds) +
                                "; it is written by harp train at the end of a run");
    std::string name = std::filesystem::path(dir).filename().string();
    if (name.empty()) name = std::filesystem::path(dir).parent_path().filename().string();
    int stages = -1;  // unknown when absent
    if (s.contains("stages")) {
      const auto n = whole_number_in(s["stages"], 1, 4096);  // a plan's limit
      if (!n)
        return invalid_argument(shown_path(file) + ": stages = " + s["stages"].dump().substr(0, 40) +
                                ": must be a whole number from 1 to 4096; it is written by harp train at the end of "
                                "a run: restore it, or leave the run out");
      stages = static_cast<int>(*n);
    }
    rows.push_back({name, text_of(s, "strategy"), text_of(s, "schedule"), text_of(s, "planned_schedule"),
                    s["predicted_s"].get<double>(), s["measured_median_s"].get<double>(), stages});
  }
  return rows;
}

Status write_run_table(const std::vector<RunRow>& rows, const std::string& baseline, std::ostream& out) {
  const RunRow* base = nullptr;
  for (const RunRow& r : rows)
    if (baseline.empty() ? r.strategy == "uniform" && r.schedule == r.planned_schedule : r.name == baseline) {
      base = &r;
      break;
    }
  if (!baseline.empty() && base == nullptr)
    return invalid_argument("--baseline " + baseline + ": no run of that name; the names are the folders' last parts");
  Table t({"run", "strategy", "schedule", "stages", "predicted", "measured", "error", "speedup measured",
           "speedup predicted"});
  for (const RunRow& r : rows)
    t.add({r.name, r.strategy, r.schedule, r.stages >= 0 ? std::to_string(r.stages) : "-", fmt_time(r.predicted_s),
           fmt_time(r.measured_s), fmt("%+.1f%%", 100 * r.error()),
           base ? fmt("%.2fx", base->measured_s / r.measured_s) : "-",
           base ? fmt("%.2fx", base->predicted_s / r.predicted_s) : "-"});
  t.print(out);
  out << "\nmeasured: median iteration of each run; predicted: the plan's simulated iteration; speedup over "
      << (base ? base->name : std::string("(no uniform run: --baseline NAME)")) << "\n";
  return Status();
}

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
