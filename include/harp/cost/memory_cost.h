// Memory per device of a stage (DESIGN.md): (param + grad + optimizer state)/tp +
// N x activation per microbatch + workspace <= memory x (1 - reserve).
// Ignores allocator fragmentation beyond the reserve and transient peaks inside a layer.
#pragma once

#include "harp/cluster/device.h"
#include "harp/common/units.h"
#include "harp/cost/cost_config.h"

namespace harp::cost {

// Per device: the training state of `param_bytes` of fp16 parameters split tp ways
// (state_bytes_per_param_byte each; under ZeRO, zero >= 1 and dp > 1, the optimizer's
// part divided over dp), plus the kernel workspace. ZeRO-2 frees the
// gradients between steps, but a pipeline accumulates them over the step's microbatches
// from its first backward, with activations in flight: the peak keeps them, and so does
// this figure. `whole_param_bytes` of them are not sharded (a tied embedding: the runtime
// sums its gradient over its own group and leaves it whole).
inline Bytes static_memory_bytes(Bytes param_bytes, int tp, int dp, int zero, const CostConfig& config,
                                 Bytes whole_param_bytes = 0) {
  const double sharded = zero >= 1 && dp > 1 ? config.optimizer_bytes_per_param_byte * (1.0 - 1.0 / dp) : 0.0;
  return (config.state_bytes_per_param_byte * param_bytes - sharded * (param_bytes - whole_param_bytes)) / tp +
         config.workspace_bytes;
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
