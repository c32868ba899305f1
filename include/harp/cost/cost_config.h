// Knobs of the analytic cost model (docs/cost_model.md). Defaults are documented there
// with the reasoning; a job file may override them under `cost:`.
#pragma once

#include "harp/common/document.h"
#include "harp/common/status.h"

#include <map>
#include <string>

namespace harp::cost {

struct CostConfig {
  // Fraction of a device's peak FLOP/s that dense transformer matmuls reach (MFU-like).
  // 0.5 is typical of well-tuned fp16 training on A100/V100-class GPUs.
  double compute_efficiency = 0.5;
  // Whether the job's cost section set compute_efficiency: then it applies to every
  // device's fp16/bf16 peak; else each device's rate follows its architecture and
  // compute_dtype (efficiency.h).
  bool efficiency_given = false;
  // What the run computes in: bfloat16 (the default: mixed precision), float16, float32
  // or float64. A job that trains takes its training.dtype.
  std::string compute_dtype = "bfloat16";
  // Fraction of peak memory bandwidth that memory-bound kernels reach.
  double memory_efficiency = 0.7;
  // Backward FLOPs as a multiple of forward (input and weight gradients).
  double backward_factor = 2.0;
  // Bytes of training state per fp16 parameter byte: fp16 weights (1) + fp16 grads (1)
  // + fp32 master weights, Adam m and v (6) = 16 bytes per parameter (mixed precision).
  double state_bytes_per_param_byte = 8.0;
  // The part of state_bytes_per_param_byte that sharded optimizer state (ZeRO-1,
  // runtime/exec/zero.h) divides over a stage's data-parallel group: the optimizer's own
  // bytes, 6 in mixed precision (fp32 master weights apart from the fp16 compute
  // weights, Adam's m and v). A job that trains derives it from training.dtype: HARP's
  // runtime keeps float32 parameters that are the master weights, so only m and v (4 of
  // 8; 8 of 16 in float64).
  double optimizer_bytes_per_param_byte = 6.0;
  // Bytes per fp16 parameter byte that ZeRO's all-gather moves (the updated parameters):
  // 1 for Megatron's bf16 parameters; a job that trains derives it (HARP's runtime
  // gathers its float32 master weights: 2; float64: 4). The all-reduce it replaces moved
  // gradient_bytes_per_param_byte both ways.
  double parameter_bytes_per_param_byte = 1.0;
  // Bytes on the wire per fp16 parameter byte when gradients are all-reduced: 1 for fp16
  // or bf16 gradients (mixed precision), 2 for float32 training (the CPU runtime's).
  double gradient_bytes_per_param_byte = 1.0;
  // Activation and cut-tensor bytes per byte of the model's fp16 figures: 1 for fp16 or
  // bf16 training, 2 for float32 (the CPU runtime's), 4 for float64. A job with a
  // training section and neither field in its cost section takes both from
  // training.dtype (job.h).
  double activation_bytes_scale = 1.0;
  // Fraction of device memory kept free for the allocator, CUDA context, fragmentation.
  double memory_reserve_fraction = 0.1;
  // Per-layer kernel workspace, bytes per device.
  double workspace_bytes = 256.0 * 1024 * 1024;
  // Profile DB (JSON, docs/file_formats.md) whose measured layer times replace the
  // roofline where it has the entry; empty: analytic only. Relative to the job file.
  std::string profile_file;
  // Measured drift (elastic re-planning, launch/elastic.h): per subcluster name, a factor
  // on every forward and backward time of its devices, from a run whose stages there
  // computed that much slower (> 1) or faster than before. Set by the launcher from the
  // run's own measurements, never read from a job file.
  std::map<std::string, double> compute_drift;

  double drift_of(const std::string& subcluster) const {
    auto it = compute_drift.find(subcluster);
    return it == compute_drift.end() ? 1.0 : it->second;
  }
};

StatusOr<CostConfig> parse_cost_config(const Json& node, const std::string& file,
                                       const std::string& path);
Json cost_config_to_json(const CostConfig& c);

}  // namespace harp::cost
