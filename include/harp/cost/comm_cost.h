// Communication costs (DESIGN.md, Cost model): bandwidth + latency for point to point,
// the ring algorithm for all-reduce. Ignores contention between concurrent transfers.
#pragma once

#include "harp/cluster/cluster.h"
#include "harp/common/units.h"

namespace harp::cost {

// A time that is affine in a byte count: fixed_s + per_byte_s x bytes (0 for 0 bytes).
struct AffineTime {
  Seconds fixed_s = 0;
  Seconds per_byte_s = 0;
  Seconds at(Bytes bytes) const { return bytes > 0 ? fixed_s + per_byte_s * bytes : 0.0; }
};

// latency + bytes / bandwidth; 0 for 0 bytes.
Seconds p2p_s(Bytes bytes, const cluster::Link& link);

// Ring all-reduce of `bytes` over `ranks` ranks: each rank sends and receives
// 2 (n-1)/n of the buffer; plus the link latency. 0 when ranks == 1.
Seconds ring_allreduce_s(Bytes bytes, int ranks, const cluster::Link& link);

// Data-parallel gradient all-reduce of `param_bytes` (fp16 gradients of the stage,
// split tp ways) over dp replicas of `sub`: inside a node when dp x tp fits one,
// otherwise over the inter-node link. 0 when dp == 1.
Seconds dp_allreduce_s(Bytes param_bytes, int dp, int tp, const cluster::Subcluster& sub);
// The same as an affine function of param_bytes.
AffineTime dp_allreduce_time(int dp, int tp, const cluster::Subcluster& sub);

}  // namespace harp::cost
