// A simulated run as the shared timeline (schedule/timeline.h) and its Chrome/Perfetto
// trace: one pid per rank ("stage i (subcluster)"), tid 0 compute, tid 1 sends (link
// occupancy), tid 2 receives. Timestamps in µs. The runtime writes measured timelines
// with the same writer.
#pragma once

#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/schedule/timeline.h"
#include "harp/sim/simulator.h"

namespace harp::sim {

schedule::Timeline timeline_of(const SimResult& result, const plan::Plan& plan);
Json chrome_trace(const SimResult& result, const plan::Plan& plan);

}  // namespace harp::sim
