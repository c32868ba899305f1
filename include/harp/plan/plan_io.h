// Plan JSON I/O. parse_plan accepts the minimal hand-written form (stages with fwd_s,
// bwd_s, comm_s plus top-level microbatches and schedule) and the full planner output.
#pragma once

#include <string>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/plan/plan.h"

namespace harp::plan {

StatusOr<Plan> parse_plan(const Json& node, const std::string& file);
StatusOr<Plan> load_plan(const std::string& file);
Json plan_to_json(const Plan& plan);
// Writes atomically (temp + rename).
Status save_plan(const Plan& plan, const std::string& file);

}  // namespace harp::plan
