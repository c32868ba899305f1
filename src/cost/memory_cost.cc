// Per-device stage memory (docs/cost_model.md). Activations are split by dp (fewer
// samples per replica) and by tp (Megatron shards most of them; the replicated
// LayerNorm inputs are a small part and are ignored).
#include "harp/cost/memory_cost.h"

namespace harp::cost {

StageMemory stage_memory(const model::ModelSpec& model, int first, int last, int microbatch_size,
                         int dp, int tp, const CostConfig& config) {
  StageMemory m;
  const int samples = (microbatch_size + dp - 1) / dp;
  Bytes params = 0, act = 0;
  for (int i = first; i < last; ++i) {
    params += model.layers[i].param_bytes;
    act += model.layers[i].activation_bytes;
  }
  m.static_bytes = config.state_bytes_per_param_byte * params / tp + config.workspace_bytes;
  m.activation_bytes = act * samples / tp;
  return m;
}

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
