// The `uniform` baseline (the Megatron default): one stage per node in subcluster
// order, equal layer counts (the first stages take the remainder), data parallel
// inside the node (tensor parallel for what the microbatch cannot split), standard 1F1B.
#pragma once

#include "harp/common/status.h"
#include "harp/cost/cost_model.h"
#include "harp/plan/plan.h"
#include "harp/planner/plan_builder.h"

namespace harp::planner {

// Infeasible if the model has fewer layers than the cluster has nodes.
StatusOr<plan::Plan> plan_uniform(const cost::CostModel& costs, const BuildOptions& options);

}  // namespace harp::planner
