// The `uniform` baseline (the Megatron default): one stage per node in subcluster
// order, equal layer counts (the first stages take the remainder), data parallel
// inside the node (tensor parallel for what the microbatch cannot split), standard 1F1B.
#pragma once

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/planner/plan_builder.h"

namespace harp::planner {

// Infeasible if the model has fewer layers than the cluster has nodes, or the cost
// source lacks the times a node's shape needs.
StatusOr<plan::Plan> plan_uniform(const StageCosts& costs, const BuildOptions& options);

}  // namespace harp::planner
