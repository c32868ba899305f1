// Communication costs (DESIGN.md, Cost model): bandwidth + latency for point to point,
// the ring algorithm for all-reduce. Ignores contention between concurrent transfers.
#pragma once

#include "harp/cluster/cluster.h"
#include "harp/common/units.h"

namespace harp::cost {

// latency + bytes / bandwidth; 0 for 0 bytes.
Seconds p2p_s(Bytes bytes, const cluster::Link& link);

// Ring all-reduce of `bytes` over `ranks` ranks: each rank sends and receives
// 2 (n-1)/n of the buffer; plus the link latency. 0 when ranks == 1.
Seconds ring_allreduce_s(Bytes bytes, int ranks, const cluster::Link& link);

}  // namespace harp::cost
