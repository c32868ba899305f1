// The per-architecture compute efficiencies (efficiency.h); sources in docs/cost_model.md.
#include "harp/cost/efficiency.h"

#include "harp/common/format.h"

namespace harp::cost {
namespace {

// Fitted to Sailor's float32 V100 blocks, all three models (bench/sailor_fit.py;
// held out one model at a time: 6% to 23% worst error per model).
constexpr double kFloat32Efficiency = 0.91;

struct Published {
  double efficiency;
  const char* source;
};

// Per-GPU utilisation a named stack published in bf16/fp16 on the architecture.
Published published_for(double capability) {
  if (capability < 8.0) return {0.30, "Megatron-LM 2019: 39 TFLOP/s on one V100"};
  if (capability < 9.0) return {0.52, "Megatron-LM, SC'21: 163 TFLOP/s per A100"};
  return {0.47, "Megatron-Core: up to 47% MFU on H100"};
}

// The dtype names a run may compute in, as literals (CostConfig::compute_dtype is one).
const char* dtype_literal(const std::string& dtype) {
  for (const char* name : {"bfloat16", "float16", "float32", "float64"})
    if (dtype == name) return name;
  return "";
}

}  // namespace

std::string ComputeRate::basis() const {
  return fmt("%s%s%.0f%% of %g TFLOP/s (%s)", dtype, *dtype ? " " : "", 100 * efficiency, peak_tflops, source);
}

ComputeRate compute_rate(const cluster::DeviceType& device, const CostConfig& config) {
  ComputeRate r;
  const std::string& dtype = config.compute_dtype;
  const bool full_precision = dtype == "float32" || dtype == "float64";
  if (config.efficiency_given || device.compute_capability <= 0) {
    r.peak_tflops = device.peak_tflops;
    r.efficiency = config.compute_efficiency;
    r.source = config.efficiency_given ? "the job's cost.compute_efficiency" : "the default efficiency";
    return r;
  }
  r.dtype = dtype_literal(dtype);
  if (full_precision && device.fp32_tflops <= 0) {
    r.peak_tflops = device.peak_tflops;
    r.efficiency = config.compute_efficiency;
    r.source = "fp16/bf16 peak: the device declares no fp32_tflops";
    return r;
  }
  if (full_precision) {
    const bool f64 = dtype == "float64";
    r.peak_tflops = f64 ? device.fp32_tflops / 2 : device.fp32_tflops;
    r.efficiency = kFloat32Efficiency;
    r.source = f64 ? "half the float32 peak; fitted to Sailor's float32 V100 measurements"
                   : "fitted to Sailor's float32 V100 measurements";
    return r;
  }
  const Published p = published_for(device.compute_capability);
  r.peak_tflops = device.peak_tflops;
  r.efficiency = p.efficiency;
  r.source = p.source;
  // A device without bfloat16 runs float16 at the same peak (a job that trains in
  // bfloat16 there is refused: job.h).
  if (dtype == "bfloat16" && !device.bfloat16) r.dtype = "float16";
  return r;
}

}  // namespace harp::cost
