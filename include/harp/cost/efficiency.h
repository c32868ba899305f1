// What the analytic roofline assumes a device computes at, per device type and training
// dtype (docs/cost_model.md, "Compute efficiencies"), and what that rests on.
#pragma once

#include <string>

#include "harp/cluster/device.h"
#include "harp/cost/cost_config.h"

namespace harp::cost {

struct ComputeRate {
  double peak_tflops = 0;  // the peak the dtype runs at on the device
  double efficiency = 0;   // the fraction of it dense transformer work reaches
  const char* dtype = "";  // as priced ("float16" on a device without bfloat16); "" when one peak serves all
  const char* source = "";  // where the efficiency comes from
  double flops_per_s() const { return peak_tflops * 1e12 * efficiency; }
  // "bfloat16 52% of 312 TFLOP/s (Megatron-LM, SC'21: 163 TFLOP/s per A100)": built only
  // for reports (the roofline calls compute_rate for every layer time).
  std::string basis() const;
};

// The job's cost.compute_efficiency of peak_tflops where it set one, or a device without
// a compute capability (the CPU, a device declared without one); else by the dtype:
//   bfloat16/float16: the tensor peak at a published per-GPU utilisation of the same
//     architecture (Volta 30%, Ampere and Ada 52%, Hopper and later 47%);
//   float32: the plain float32 peak (PyTorch leaves TF32 matmuls off) at 91%, fitted to
//     Sailor's float32 V100 measurements (bench/sailor_fit.py);
//   float64: half that peak, at the same fraction.
// A device without fp32_tflops in a float32 or float64 run: its fp16/bf16 peak at the
// configured efficiency, and the basis says so.
ComputeRate compute_rate(const cluster::DeviceType& device, const CostConfig& config);

}  // namespace harp::cost
