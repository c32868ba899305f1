// An SVG timeline a person can read: one row per stage (forward blue, backward green,
// microbatch numbers inside), one thin row per link under it showing transfers in
// both directions, a time axis in ms, and a legend with the iteration time.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "harp/schedule/timeline.h"

#include "harp/sim/simulator.h"

namespace harp::sim {

std::string svg_timeline(const SimResult& result, const plan::Plan& plan,
                         const std::string& title);

// Timelines read from traces (schedule/timeline.h), one panel each, stacked on one time
// axis so a predicted and a measured run compare by eye: compute boxes per rank, and
// under each row the time it waited for an input (receive lane). Each panel starts at
// its own first event. `panels`: (heading, timeline).
std::string svg_timelines(const std::vector<std::pair<std::string, schedule::Timeline>>& panels,
                          const std::string& title);

}  // namespace harp::sim
