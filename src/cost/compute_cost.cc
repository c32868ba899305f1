// The analytic roofline for one layer (docs/cost_model.md). Tensor parallelism follows
// Megatron (and the runtime, runtime/gpt.h): the attention output projection and FC2
// each end in an all-reduce of the activations, in forward and again in backward; the
// vocabulary-parallel embedding and LM head add one each.
#include "harp/cost/compute_cost.h"

#include <algorithm>

#include "harp/cost/comm_cost.h"
#include "harp/cost/efficiency.h"

namespace harp::cost {

LayerTime analytic_layer_time(const model::Layer& layer, const cluster::DeviceType& device,
                              int samples, int tp, const cluster::Link& intra_node,
                              const CostConfig& config) {
  const double flops_per_s = compute_rate(device, config).flops_per_s();
  const double bytes_per_s = gbs_to_bytes_per_s(device.memory_bandwidth_gbs) * config.memory_efficiency;
  const double flops = layer.fwd_flops * samples / tp;
  const double bytes = (layer.param_bytes + layer.mem_traffic_bytes * samples) / tp;
  const Seconds fwd_compute = std::max(flops / flops_per_s, bytes / bytes_per_s);
  const Seconds bwd_compute =
      std::max(config.backward_factor * flops / flops_per_s, 2.0 * bytes / bytes_per_s);
  Seconds fwd_collective = 0, bwd_collective = 0;
  if (tp > 1) {
    // Each attn_out / mlp_out piece all-reduces its (s x h) output in forward (g) and
    // the gradient of its sub-block's input in backward (f). The vocabulary-parallel
    // embedding sums its output in forward only; the LM head's input gradient is summed
    // in backward only (the cross-entropy's per-token sums are negligible).
    if (layer.kind == model::LayerKind::kHead) {
      fwd_collective = ring_allreduce_s(layer.output_bytes * samples, tp, intra_node);
    } else if (layer.kind == model::LayerKind::kTail) {
      bwd_collective = ring_allreduce_s(layer.input_bytes * samples, tp, intra_node);
    } else {
      const int reductions = ((layer.pieces & 2) ? 1 : 0) + ((layer.pieces & 8) ? 1 : 0);
      fwd_collective = bwd_collective = reductions * ring_allreduce_s(layer.output_bytes * samples, tp, intra_node);
    }
  }
  LayerTime t;
  t.fwd_s = fwd_compute + fwd_collective;
  t.bwd_s = bwd_compute + bwd_collective;
  return t;
}

}  // namespace harp::cost
