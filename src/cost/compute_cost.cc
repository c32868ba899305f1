// The analytic roofline for one layer (docs/cost_model.md). Tensor parallelism follows
// Megatron: the attention output projection and FC2 each end in an all-reduce of the
// activations, in forward and again in backward.
#include "harp/cost/compute_cost.h"

#include <algorithm>

#include "harp/cost/comm_cost.h"

namespace harp::cost {

LayerTime analytic_layer_time(const model::Layer& layer, const cluster::DeviceType& device,
                              int samples, int tp, const cluster::Link& intra_node,
                              const CostConfig& config) {
  const double flops_per_s = tflops_to_flops_per_s(device.peak_tflops) * config.compute_efficiency;
  const double bytes_per_s = gbs_to_bytes_per_s(device.memory_bandwidth_gbs) * config.memory_efficiency;
  const double flops = layer.fwd_flops * samples / tp;
  const double bytes = (layer.param_bytes + layer.mem_traffic_bytes * samples) / tp;
  const Seconds fwd_compute = std::max(flops / flops_per_s, bytes / bytes_per_s);
  const Seconds bwd_compute =
      std::max(config.backward_factor * flops / flops_per_s, 2.0 * bytes / bytes_per_s);
  Seconds collective = 0;
  if (tp > 1) {
    // Each attn_out / mlp_out piece all-reduces its (s x h) fp16 output.
    int reductions = ((layer.pieces & 2) ? 1 : 0) + ((layer.pieces & 8) ? 1 : 0);
    collective = reductions * ring_allreduce_s(layer.output_bytes * samples, tp, intra_node);
  }
  LayerTime t;
  t.fwd_s = fwd_compute + collective;
  t.bwd_s = bwd_compute + collective;
  return t;
}

}  // namespace harp::cost
