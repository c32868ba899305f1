// Memory per device of a stage (DESIGN.md): (param + grad + optimizer state)/tp +
// N x activation per microbatch + workspace <= memory x (1 - reserve).
// Ignores allocator fragmentation beyond the reserve and transient peaks inside a layer.
#pragma once

#include "harp/cluster/device.h"
#include "harp/common/units.h"
#include "harp/cost/cost_config.h"

namespace harp::cost {

// Per device: the training state of `param_bytes` of fp16 parameters split tp ways
// (state_bytes_per_param_byte each), plus the kernel workspace.
inline Bytes static_memory_bytes(Bytes param_bytes, int tp, const CostConfig& config) {
  return config.state_bytes_per_param_byte * param_bytes / tp + config.workspace_bytes;
}
// Per device and in-flight microbatch: activations of `samples` samples (a replica's
// share), sharded tp ways (Megatron shards most of them; the replicated LayerNorm
// inputs are a small part and are ignored).
inline Bytes activation_memory_bytes(Bytes activation_bytes_per_sample, int samples, int tp) {
  return activation_bytes_per_sample * samples / tp;
}

// Optimizer step for `param_bytes` of fp16 parameters split tp ways: memory bound, it
// reads and writes the training state once.
Seconds optimizer_step_s(Bytes param_bytes, int tp, const cluster::DeviceType& device,
                         const CostConfig& config);
// Seconds per parameter byte of optimizer_step_s (it is linear).
Seconds optimizer_s_per_param_byte(int tp, const cluster::DeviceType& device, const CostConfig& config);

// Usable bytes of a device: memory x (1 - reserve).
Bytes usable_memory_bytes(const cluster::DeviceType& device, const CostConfig& config);

}  // namespace harp::cost
