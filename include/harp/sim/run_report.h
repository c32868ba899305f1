// A training run's prediction beside its measurement, torch-free: what `harp train`
// prints at the end and writes to summary.json. The prediction is the plan's simulated
// iteration under the schedule the run used (what `harp simulate` predicts), with the
// closed form beside it.
#pragma once

#include <string>

#include "harp/plan/plan.h"

namespace harp::sim {

struct PredictionReport {
  double predicted_s = 0;    // simulated; the closed form when the schedule cannot be simulated
  double closed_form_s = 0;  // the plan's own prediction
  double measured_s = 0;     // the run's median iteration
  double error = 0;          // (predicted - measured) / measured; 0 without both
  bool emulated_stages = false;  // the plan has stages on emulated (slower) devices
};

// `plan.schedule` is the schedule the run used.
PredictionReport predict_against_measured(const plan::Plan& plan, double measured_s);

// "predicted X/step by the plan (simulated; closed form Y; costs: SOURCE), measured Z:
// error E%" (under another schedule than the `planned` one, that is said instead of the
// closed form; a plan with emulated devices run without `emulated` says so).
std::string prediction_line(const PredictionReport& report, const plan::Plan& plan, plan::ScheduleKind planned,
                            bool emulated);

}  // namespace harp::sim
