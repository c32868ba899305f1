// The name tables of the training configuration's enums (see names.h).
#include "harp/config/names.h"

namespace harp::config {

std::optional<Dtype> reduce_dtype(GradReduceDtype d) {
  switch (d) {
    case GradReduceDtype::kFloat32:
      return Dtype::kFloat32;
    case GradReduceDtype::kFloat16:
      return Dtype::kFloat16;
    case GradReduceDtype::kBFloat16:
      return Dtype::kBFloat16;
    case GradReduceDtype::kAuto:
      break;
  }
  return std::nullopt;
}

std::optional<Recompute> forced_recompute(RunRecompute r) {
  switch (r) {
    case RunRecompute::kNone:
      return Recompute::kNone;
    case RunRecompute::kSelective:
      return Recompute::kSelective;
    case RunRecompute::kFull:
      return Recompute::kFull;
    case RunRecompute::kPlan:
      break;
  }
  return std::nullopt;
}

template <>
const std::vector<std::pair<Dtype, std::string>>& name_table<Dtype>() {
  static const std::vector<std::pair<Dtype, std::string>> t = {
      {Dtype::kFloat32, "float32"}, {Dtype::kFloat64, "float64"}, {Dtype::kBFloat16, "bfloat16"},
      {Dtype::kFloat16, "float16"}};
  return t;
}

template <>
const std::vector<std::pair<Device, std::string>>& name_table<Device>() {
  static const std::vector<std::pair<Device, std::string>> t = {
      {Device::kAuto, "auto"}, {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"}};
  return t;
}

template <>
const std::vector<std::pair<LossScale, std::string>>& name_table<LossScale>() {
  static const std::vector<std::pair<LossScale, std::string>> t = {
      {LossScale::kAuto, "auto"}, {LossScale::kDynamic, "dynamic"}, {LossScale::kNone, "none"}};
  return t;
}

template <>
const std::vector<std::pair<GradReduceDtype, std::string>>& name_table<GradReduceDtype>() {
  static const std::vector<std::pair<GradReduceDtype, std::string>> t = {
      {GradReduceDtype::kAuto, "auto"}, {GradReduceDtype::kFloat32, "float32"},
      {GradReduceDtype::kFloat16, "float16"}, {GradReduceDtype::kBFloat16, "bfloat16"}};
  return t;
}

std::optional<int> forced_zero(RunZero z) {
  if (z == RunZero::kPlan) return std::nullopt;
  return z == RunZero::k0 ? 0 : z == RunZero::k1 ? 1 : 2;
}

template <>
const std::vector<std::pair<RunZero, std::string>>& name_table<RunZero>() {
  static const std::vector<std::pair<RunZero, std::string>> t = {
      {RunZero::kPlan, "plan"}, {RunZero::k0, "0"}, {RunZero::k1, "1"}, {RunZero::k2, "2"}};
  return t;
}

template <>
const std::vector<std::pair<RunRecompute, std::string>>& name_table<RunRecompute>() {
  static const std::vector<std::pair<RunRecompute, std::string>> t = {
      {RunRecompute::kPlan, "plan"}, {RunRecompute::kNone, "none"}, {RunRecompute::kSelective, "selective"},
      {RunRecompute::kFull, "full"}};
  return t;
}

}  // namespace harp::config
