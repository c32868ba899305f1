// The analytic and profile-DB layer sources (the table source is in cost_table.cc).
#include "harp/cost/layer_costs.h"

#include "harp/cost/compute_cost.h"

namespace harp::cost {

const char* cost_source_name(CostSource source) {
  switch (source) {
    case CostSource::kAnalytic: return "analytic";
    case CostSource::kProfile: return "profile";
    case CostSource::kTable: return "table";
  }
  return "?";
}

std::vector<LayerBytes> layer_bytes_of(const model::ModelSpec& model) {
  std::vector<LayerBytes> out;
  out.reserve(model.layers.size());
  for (const auto& l : model.layers)
    out.push_back({l.param_bytes, l.activation_bytes, l.output_bytes, l.output_shape});
  return out;
}

AnalyticCosts::AnalyticCosts(const model::ModelSpec& model, CostConfig config)
    : model_(model), config_(config), bytes_(layer_bytes_of(model)) {}

std::optional<LayerTime> AnalyticCosts::time(const cluster::Cluster& cluster, int sub, int layer,
                                             int samples, int tp) const {
  return analytic_layer_time(model_.layers.at(layer), cluster.device_of(sub), samples, tp,
                             cluster.subclusters.at(sub).intra_node, config_);
}

ProfiledCosts::ProfiledCosts(const model::ModelSpec& model, const profile::ProfileDb& db,
                             CostConfig config, std::string file)
    : model_(model), db_(db), analytic_(model, config), file_(std::move(file)) {}

std::optional<LayerTime> ProfiledCosts::time(const cluster::Cluster& cluster, int sub, int layer,
                                             int samples, int tp) const {
  const std::string& device = real_device(cluster.subclusters.at(sub).device);
  if (auto e = db_.find({device, model_.layers.at(layer).signature, samples, tp})) {
    LayerTime t;
    t.fwd_s = e->fwd_s;
    t.bwd_s = e->bwd_s;
    t.source = CostSource::kProfile;
    return t;
  }
  return analytic_.time(cluster, sub, layer, samples, tp);
}

std::string ProfiledCosts::describe() const {
  return "profile DB " + file_ + " (" + std::to_string(db_.size()) +
         " entries; the analytic roofline for keys it lacks)";
}

}  // namespace harp::cost
