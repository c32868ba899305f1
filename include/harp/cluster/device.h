// Device types: the built-in catalogue of accelerators and user-defined entries.
// Figures are vendor datasheet peaks (dense fp16/bf16 tensor TFLOP/s, no sparsity; fp16
// alone where the device has no bf16: V100, T4),
// memory capacity and HBM/GDDR bandwidth; sources in docs/cost_model.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace harp::cluster {

struct DeviceType {
  std::string name;
  double peak_tflops = 0.0;           // dense fp16/bf16 peak, TFLOP/s
  // Plain float32 peak (CUDA cores, no TF32), TFLOP/s: what a float32 run computes at
  // (PyTorch leaves TF32 matmuls off); 0 unknown.
  double fp32_tflops = 0.0;
  double memory_gib = 0.0;            // device memory, GiB
  double memory_bandwidth_gbs = 0.0;  // memory bandwidth, GB/s
  // Emulation only (DESIGN.md, last section): a compute slowdown a runtime applies to
  // pretend this device is slower. 1 = none. Shown in every report when not 1.
  double emulated_slowdown = 1.0;
  // What the device computes in: its CUDA compute capability (7.0 for V100; 0 unknown or
  // not a CUDA device) and whether it has bfloat16 arithmetic (from 8.0 on; a CPU does).
  double compute_capability = 0.0;
  bool bfloat16 = true;
};

// The built-in catalogue, in a stable order.
const std::vector<DeviceType>& builtin_devices();

// Looks up a built-in device by exact name; nullopt if unknown.
std::optional<DeviceType> find_builtin_device(const std::string& name);

// Comma-separated names of the built-in devices, for error messages.
std::string builtin_device_names();

}  // namespace harp::cluster
