// Parsing and printing of the cost section (cost_config.h); messages name the field path.
#include "harp/cost/cost_config.h"

#include "harp/common/fields.h"

namespace harp::cost {

StatusOr<CostConfig> parse_cost_config(const Json& node, const std::string& file,
                                       const std::string& path) {
  CostConfig c;
  FieldReader r(node, file, path);
  c.efficiency_given = node.is_object() && node.contains("compute_efficiency");
  c.compute_efficiency = r.positive("compute_efficiency", c.compute_efficiency);
  c.compute_dtype = r.string("compute_dtype", c.compute_dtype);
  if (!r.failed() && c.compute_dtype != "bfloat16" && c.compute_dtype != "float16" && c.compute_dtype != "float32" &&
      c.compute_dtype != "float64")
    r.fail("compute_dtype", "\"" + c.compute_dtype + "\"", "must be bfloat16, float16, float32 or float64",
           "name the dtype the run computes in (a job with a training section takes training.dtype)");
  c.memory_efficiency = r.positive("memory_efficiency", c.memory_efficiency);
  c.backward_factor = r.positive("backward_factor", c.backward_factor);
  c.state_bytes_per_param_byte = r.non_negative("state_bytes_per_param_byte", c.state_bytes_per_param_byte);
  c.optimizer_bytes_per_param_byte =
      r.non_negative("optimizer_bytes_per_param_byte", c.optimizer_bytes_per_param_byte);
  c.parameter_bytes_per_param_byte = r.positive("parameter_bytes_per_param_byte", c.parameter_bytes_per_param_byte);
  c.memory_reserve_fraction = r.non_negative("memory_reserve_fraction", c.memory_reserve_fraction);
  c.workspace_bytes = r.non_negative("workspace_bytes", c.workspace_bytes);
  c.gradient_bytes_per_param_byte = r.positive("gradient_bytes_per_param_byte", c.gradient_bytes_per_param_byte);
  c.activation_bytes_scale = r.positive("activation_bytes_scale", c.activation_bytes_scale);
  c.profile_file = r.string("profile", "");
  if (!c.profile_file.empty()) c.profile_file = resolve_relative_to(file, c.profile_file);
  if (!r.failed() && c.compute_efficiency > 1)
    r.fail("compute_efficiency", Json(c.compute_efficiency).dump(), "must be at most 1",
           "use a fraction of peak such as 0.5");
  if (!r.failed() && c.memory_efficiency > 1)
    r.fail("memory_efficiency", Json(c.memory_efficiency).dump(), "must be at most 1",
           "use a fraction of peak such as 0.7");
  if (!r.failed() && c.optimizer_bytes_per_param_byte > c.state_bytes_per_param_byte)
    r.fail("optimizer_bytes_per_param_byte", Json(c.optimizer_bytes_per_param_byte).dump(),
           "must not exceed state_bytes_per_param_byte (" + Json(c.state_bytes_per_param_byte).dump() + ")",
           "it is the optimizer's part of the training state; lower it or raise state_bytes_per_param_byte");
  if (!r.failed() && c.memory_reserve_fraction >= 1)
    r.fail("memory_reserve_fraction", Json(c.memory_reserve_fraction).dump(),
           "must be below 1", "use a small fraction such as 0.1");
  HARP_RETURN_IF_ERROR(r.finish());
  return c;
}

Json cost_config_to_json(const CostConfig& c) {
  return {{"compute_efficiency", c.compute_efficiency},
          {"compute_dtype", c.compute_dtype},
          {"memory_efficiency", c.memory_efficiency},
          {"backward_factor", c.backward_factor},
          {"state_bytes_per_param_byte", c.state_bytes_per_param_byte},
          {"optimizer_bytes_per_param_byte", c.optimizer_bytes_per_param_byte},
          {"parameter_bytes_per_param_byte", c.parameter_bytes_per_param_byte},
          {"memory_reserve_fraction", c.memory_reserve_fraction},
          {"workspace_bytes", c.workspace_bytes},
          {"gradient_bytes_per_param_byte", c.gradient_bytes_per_param_byte},
          {"activation_bytes_scale", c.activation_bytes_scale},
          {"profile", c.profile_file}};
}

}  // namespace harp::cost
