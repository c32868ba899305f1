// Chrome/Perfetto trace JSON of a timeline: one pid per rank ("stage i"), tid 0 for
// compute, tid 1 for sends (link occupancy), tid 2 for receives. Timestamps in µs.
// The runtime writes the same format for measured timelines.
#pragma once

#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/sim/simulator.h"

namespace harp::sim {

Json chrome_trace(const SimResult& result, const plan::Plan& plan);

}  // namespace harp::sim
