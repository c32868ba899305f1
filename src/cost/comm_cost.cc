// Point-to-point and ring all-reduce times (docs/cost_model.md).
#include "harp/cost/comm_cost.h"

namespace harp::cost {

Seconds p2p_s(Bytes bytes, const cluster::Link& link) {
  if (bytes <= 0) return 0;
  return link.transfer_s(bytes);
}

Seconds ring_allreduce_s(Bytes bytes, int ranks, const cluster::Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = ranks;
  return 2.0 * (n - 1.0) / n * bytes / link.bytes_per_s() + link.latency_s;
}

AffineTime dp_allreduce_time(int dp, int tp, const cluster::Subcluster& sub) {
  if (dp <= 1) return {};
  const cluster::Link& link = dp * tp <= sub.devices_per_node ? sub.intra_node : sub.inter_node;
  const double n = dp;
  return {link.latency_s, 2.0 * (n - 1.0) / n / tp / link.bytes_per_s()};
}

Seconds dp_allreduce_s(Bytes param_bytes, int dp, int tp, const cluster::Subcluster& sub) {
  return dp_allreduce_time(dp, tp, sub).at(param_bytes);
}

}  // namespace harp::cost
