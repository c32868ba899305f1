// Zero-redundant profiling, the grouping half (torch-free): layers with one structural
// signature (model/model_spec.h: structure and shapes) cost the same, so the profiler
// measures one representative per group and the profile DB keys its figures by the
// signature. For a GPT with R blocks at granularity k that is 2 + k groups (head, the
// j-th sub-layer of every block, tail) instead of 2 + R·k layers.
#pragma once

#include <string>
#include <vector>

#include "harp/model/model_spec.h"

namespace harp::profile {

struct LayerGroup {
  std::string signature;
  int representative = 0;   // the first layer with it (the one measured)
  std::vector<int> layers;  // every layer with it, ascending
};

// Groups in order of first appearance.
std::vector<LayerGroup> unique_layers(const model::ModelSpec& model);

}  // namespace harp::profile
