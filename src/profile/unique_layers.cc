// Grouping by signature (see unique_layers.h).
#include "harp/profile/unique_layers.h"

#include <map>

namespace harp::profile {

std::vector<LayerGroup> unique_layers(const model::ModelSpec& model) {
  std::vector<LayerGroup> groups;
  std::map<std::string, size_t> index;
  for (int i = 0; i < model.num_layers(); ++i) {
    const std::string& sig = model.layers[i].signature;
    auto [it, fresh] = index.emplace(sig, groups.size());
    if (fresh) groups.push_back({sig, i, {}});
    groups[it->second].layers.push_back(i);
  }
  return groups;
}

}  // namespace harp::profile
