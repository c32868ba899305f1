// A run's prediction beside its measurement (see run_report.h).
#include "harp/sim/run_report.h"

#include <algorithm>

#include "harp/common/format.h"
#include "harp/sim/run.h"

namespace harp::sim {

PredictionReport predict_against_measured(const plan::Plan& plan, double measured_s) {
  PredictionReport r;
  r.closed_form_s = r.predicted_s = plan.predicted.iteration_s;
  SimOptions so;
  so.record_spans = false;
  auto simulated = simulate_plan(plan, plan.schedule, so);
  if (simulated.ok()) r.predicted_s = simulated->result.iteration_s();
  r.measured_s = measured_s;
  r.emulated_stages = std::any_of(plan.stages.begin(), plan.stages.end(),
                                  [](const plan::Stage& s) {
                                    return s.emulated_slowdown > 1.0 ||
                                           std::any_of(s.replica_slowdowns.begin(), s.replica_slowdowns.end(),
                                                       [](double f) { return f > 1.0; });
                                  });
  r.error = r.predicted_s > 0 && measured_s > 0 ? (r.predicted_s - measured_s) / measured_s : 0.0;
  return r;
}

std::string prediction_line(const PredictionReport& r, const plan::Plan& p, plan::ScheduleKind planned,
                            bool emulated) {
  const std::string source = p.cost_source.empty() ? "unknown" : p.cost_source.substr(0, 60);
  return "predicted " + fmt_time(r.predicted_s) + "/step by the plan (simulated" +
         (p.schedule == planned ? "; closed form " + fmt_time(r.closed_form_s)
                                : std::string(" under ") + plan::schedule_kind_name(p.schedule) + ", not the planned " +
                                      plan::schedule_kind_name(planned)) +
         "; costs: " + source + (p.cost_source.size() > 60 ? "..." : "") + "), measured " + fmt_time(r.measured_s) +
         fmt(": error %+.1f%%", 100 * r.error) +
         (r.emulated_stages && !emulated ? " (the plan's emulated devices were not emulated: --emulate)" : "");
}

}  // namespace harp::sim
