// Optimizer and usable-memory terms (docs/cost_model.md).
#include "harp/cost/memory_cost.h"

namespace harp::cost {

Seconds optimizer_s_per_param_byte(int tp, const cluster::DeviceType& device, const CostConfig& config) {
  const double bytes_per_s = gbs_to_bytes_per_s(device.memory_bandwidth_gbs) * config.memory_efficiency;
  return 2.0 * config.state_bytes_per_param_byte / tp / bytes_per_s;
}

Seconds optimizer_step_s(Bytes param_bytes, int tp, const cluster::DeviceType& device,
                         const CostConfig& config) {
  return optimizer_s_per_param_byte(tp, device, config) * param_bytes;
}

Bytes usable_memory_bytes(const cluster::DeviceType& device, const CostConfig& config) {
  return gib_to_bytes(device.memory_gib) * (1.0 - config.memory_reserve_fraction);
}

}  // namespace harp::cost
