// Analytic compute time of one layer on one device type: a roofline with efficiency
// factors, so planning works before anything is profiled. Ignores kernel launch
// overheads, fusion across layers and overlap of tensor-parallel collectives.
#pragma once

#include "harp/cluster/cluster.h"
#include "harp/cost/cost_config.h"
#include "harp/cost/layer_costs.h"
#include "harp/model/model_spec.h"

namespace harp::cost {

// Time of `layer` for `samples` samples on one device of `device`, the layer split
// tp ways (tensor parallel inside a node over `intra_node`).
// fwd = max(flops / (peak x eff), bytes / (mem_bw x mem_eff)) + tp collective;
// bwd = backward_factor x the compute part + the same collective.
LayerTime analytic_layer_time(const model::Layer& layer, const cluster::DeviceType& device,
                              int samples, int tp, const cluster::Link& intra_node,
                              const CostConfig& config);

}  // namespace harp::cost
