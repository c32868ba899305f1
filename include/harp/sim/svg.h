// An SVG timeline a person can read: one row per stage (forward blue, backward green,
// microbatch numbers inside), one thin row per link under it showing transfers in
// both directions, a time axis in ms, and a legend with the iteration time.
#pragma once

#include <string>

#include "harp/sim/simulator.h"

namespace harp::sim {

std::string svg_timeline(const SimResult& result, const plan::Plan& plan,
                         const std::string& title);

}  // namespace harp::sim
