#include "harp/cluster/device.h"

namespace harp::cluster {

const std::vector<DeviceType>& builtin_devices() {
  // Dense (non-sparse) fp16/bf16 tensor-core peaks from the vendors' datasheets; the
  // SXM parts where both exist. `cpu` is a nominal figure for planning CPU test runs.
  // Plain float32 (non-tensor) peaks likewise, the SXM parts'.
  static const std::vector<DeviceType> kDevices = {
      // name, peak TFLOP/s, float32 TFLOP/s, GiB, GB/s, emulated slowdown, compute capability, bf16
      {"V100-16GB", 125.0, 15.7, 16.0, 900.0, 1.0, 7.0, false},
      {"V100-32GB", 125.0, 15.7, 32.0, 900.0, 1.0, 7.0, false},
      {"A100-40GB", 312.0, 19.5, 40.0, 1555.0, 1.0, 8.0, true},
      {"A100-80GB", 312.0, 19.5, 80.0, 2039.0, 1.0, 8.0, true},
      {"H100-80GB", 989.0, 67.0, 80.0, 3350.0, 1.0, 9.0, true},
      {"H800", 989.0, 67.0, 80.0, 3350.0, 1.0, 9.0, true},
      {"H200", 989.0, 67.0, 141.0, 4800.0, 1.0, 9.0, true},
      {"GH200", 989.0, 67.0, 96.0, 4000.0, 1.0, 9.0, true},
      {"L40S", 362.0, 91.6, 48.0, 864.0, 1.0, 8.9, true},
      {"RTX4090", 165.0, 82.6, 24.0, 1008.0, 1.0, 8.9, true},
      {"RTX3090", 71.0, 35.6, 24.0, 936.0, 1.0, 8.6, true},
      {"T4", 65.0, 8.1, 16.0, 320.0, 1.0, 7.5, false},
      {"cpu", 1.0, 1.0, 16.0, 50.0, 1.0, 0.0, true},
  };

  return kDevices;
}

std::optional<DeviceType> find_builtin_device(const std::string& name) {
  for (const auto& d : builtin_devices())
    if (d.name == name) return d;
  return std::nullopt;
}

std::string builtin_device_names() {
  std::string out;
  for (const auto& d : builtin_devices()) out += (out.empty() ? "" : ", ") + d.name;
  return out;
}

}  // namespace harp::cluster
