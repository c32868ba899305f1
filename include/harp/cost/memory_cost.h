// Memory per device of a stage (DESIGN.md): (param + grad + optimizer state)/tp +
// N x activation per microbatch + workspace <= memory x (1 - reserve).
// Ignores allocator fragmentation beyond the reserve and transient peaks inside a layer.
#pragma once

#include "harp/cluster/device.h"
#include "harp/cost/cost_config.h"
#include "harp/model/model_spec.h"

namespace harp::cost {

struct StageMemory {
  Bytes static_bytes = 0;      // training state + workspace, per device
  Bytes activation_bytes = 0;  // per in-flight microbatch, per device
  Bytes total(int launch_count) const { return static_bytes + launch_count * activation_bytes; }
};

// Memory of layers [first, last) on one device when a microbatch of `microbatch_size`
// samples is split over dp replicas and each layer tp ways.
StageMemory stage_memory(const model::ModelSpec& model, int first, int last, int microbatch_size,
                         int dp, int tp, const CostConfig& config);

// Optimizer step for `param_bytes` of fp16 parameters split tp ways: memory bound, it
// reads and writes the training state once.
Seconds optimizer_step_s(Bytes param_bytes, int tp, const cluster::DeviceType& device,
                         const CostConfig& config);
// Seconds per parameter byte of optimizer_step_s (it is linear).
Seconds optimizer_s_per_param_byte(int tp, const cluster::DeviceType& device, const CostConfig& config);

// Usable bytes of a device: memory x (1 - reserve).
Bytes usable_memory_bytes(const cluster::DeviceType& device, const CostConfig& config);

}  // namespace harp::cost
