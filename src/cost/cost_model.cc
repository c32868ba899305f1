// CostModel: the profile DB first, the analytic roofline for whatever it lacks.
#include "harp/cost/cost_model.h"

#include "harp/common/fields.h"

namespace harp::cost {

CostModel::CostModel(const cluster::Cluster& cluster, const model::ModelSpec& model,
                     const profile::ProfileDb* db, CostConfig config)
    : cluster_(cluster), model_(model), db_(db), config_(config) {}

LayerTime CostModel::layer_time(int sub, int layer, int samples, int tp) const {
  const auto& device = cluster_.device_of(sub);
  const auto& l = model_.layers.at(layer);
  if (db_ != nullptr) {
    auto e = db_->find({device.name, l.signature, samples, tp});
    if (e) {
      LayerTime t;
      t.fwd_s = e->fwd_s;
      t.bwd_s = e->bwd_s;
      t.measured = true;
      return t;
    }
  }
  return analytic_layer_time(l, device, samples, tp, cluster_.subclusters.at(sub).intra_node,
                             config_);
}

StageTime CostModel::stage_time(int sub, int first, int last, int microbatch_size, int dp,
                                int tp) const {
  StageTime st;
  const int samples = (microbatch_size + dp - 1) / dp;
  for (int i = first; i < last; ++i) {
    LayerTime t = layer_time(sub, i, samples, tp);
    st.fwd_s += t.fwd_s;
    st.bwd_s += t.bwd_s;
    st.measured_layers += t.measured ? 1 : 0;
  }
  return st;
}

Bytes CostModel::cut_bytes(int layer, int microbatch_size) const {
  return model_.layers.at(layer).output_bytes * microbatch_size;
}

Seconds CostModel::allreduce_s(int sub, int first, int last, int dp, int tp) const {
  Bytes grads = 0;
  for (int i = first; i < last; ++i) grads += model_.layers[i].param_bytes;
  return dp_allreduce_s(grads, dp, tp, cluster_.subclusters.at(sub));
}

Seconds CostModel::optimizer_s(int sub, int first, int last, int tp) const {
  Bytes params = 0;
  for (int i = first; i < last; ++i) params += model_.layers[i].param_bytes;
  return optimizer_step_s(params, tp, cluster_.device_of(sub), config_);
}

StageMemory CostModel::memory(int first, int last, int microbatch_size, int dp, int tp) const {
  return stage_memory(model_, first, last, microbatch_size, dp, tp, config_);
}

StatusOr<CostConfig> parse_cost_config(const Json& node, const std::string& file,
                                       const std::string& path) {
  CostConfig c;
  FieldReader r(node, file, path);
  c.compute_efficiency = r.positive("compute_efficiency", c.compute_efficiency);
  c.memory_efficiency = r.positive("memory_efficiency", c.memory_efficiency);
  c.backward_factor = r.positive("backward_factor", c.backward_factor);
  c.state_bytes_per_param_byte = r.non_negative("state_bytes_per_param_byte", c.state_bytes_per_param_byte);
  c.memory_reserve_fraction = r.non_negative("memory_reserve_fraction", c.memory_reserve_fraction);
  c.workspace_bytes = r.non_negative("workspace_bytes", c.workspace_bytes);
  if (!r.failed() && c.compute_efficiency > 1)
    r.fail("compute_efficiency", Json(c.compute_efficiency).dump(), "must be at most 1",
           "use a fraction of peak such as 0.5");
  if (!r.failed() && c.memory_efficiency > 1)
    r.fail("memory_efficiency", Json(c.memory_efficiency).dump(), "must be at most 1",
           "use a fraction of peak such as 0.7");
  if (!r.failed() && c.memory_reserve_fraction >= 1)
    r.fail("memory_reserve_fraction", Json(c.memory_reserve_fraction).dump(),
           "must be below 1", "use a small fraction such as 0.1");
  HARP_RETURN_IF_ERROR(r.finish());
  return c;
}

Json cost_config_to_json(const CostConfig& c) {
  return {{"compute_efficiency", c.compute_efficiency},
          {"memory_efficiency", c.memory_efficiency},
          {"backward_factor", c.backward_factor},
          {"state_bytes_per_param_byte", c.state_bytes_per_param_byte},
          {"memory_reserve_fraction", c.memory_reserve_fraction},
          {"workspace_bytes", c.workspace_bytes}};
}

}  // namespace harp::cost
