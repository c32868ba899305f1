// The settings of a training configuration that take one of a few names, as enums with
// one name table each (names.cc). The table is the one spelling of the names: the job
// file's reader, the `harp train` flags' checks (CLI11's transformers take name_map())
// and the error messages (names_text()) all read it, and a value is parsed once, when
// the file or the command line is read.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harp/common/recompute.h"

namespace harp::config {

// float32 | float64 | bfloat16 | float16 (runtime/nn/precision.h).
enum class Dtype { kFloat32, kFloat64, kBFloat16, kFloat16 };
// auto (cuda:LOCAL_RANK when libtorch sees CUDA, else the CPU) | cpu | cuda.
enum class Device { kAuto, kCpu, kCuda };
// Dynamic loss scaling: auto (on for float16) | dynamic | none.
enum class LossScale { kAuto, kDynamic, kNone };
// The data-parallel gradient all-reduce's dtype: auto (the gradients' own) | float32 |
// float16 | bfloat16 (NCCL only).
enum class GradReduceDtype { kAuto, kFloat32, kFloat16, kBFloat16 };
// Activation recomputation of a run: plan (each stage as its plan says) | none |
// selective | full (every stage).
enum class RunRecompute { kPlan, kNone, kSelective, kFull };
// Sharded optimizer state of a run (runtime/exec/zero.h): plan (each stage as its plan
// says) | 0 | 1 | 2 (every stage).
enum class RunZero { kPlan, k0, k1, k2 };

// What a run does with these: the dtype the gradients are all-reduced in (none: their
// own), and the recomputation every stage uses (none: each stage as its plan says).
std::optional<Dtype> reduce_dtype(GradReduceDtype d);
// The ZeRO level a run forces on every stage; nullopt for kPlan.
std::optional<int> forced_zero(RunZero z);
std::optional<Recompute> forced_recompute(RunRecompute r);

// Every (value, name) of E, in the order messages list them.
template <class E>
const std::vector<std::pair<E, std::string>>& name_table();

template <>
const std::vector<std::pair<Dtype, std::string>>& name_table<Dtype>();
template <>
const std::vector<std::pair<Device, std::string>>& name_table<Device>();
template <>
const std::vector<std::pair<LossScale, std::string>>& name_table<LossScale>();
template <>
const std::vector<std::pair<GradReduceDtype, std::string>>& name_table<GradReduceDtype>();
template <>
const std::vector<std::pair<RunRecompute, std::string>>& name_table<RunRecompute>();
template <>
const std::vector<std::pair<RunZero, std::string>>& name_table<RunZero>();

template <class E>
const std::string& name_of(E value) {
  for (const auto& [v, name] : name_table<E>())
    if (v == value) return name;
  return name_table<E>().front().second;  // unreachable for a valid E
}

// False when `name` is none of E's.
template <class E>
bool parse_name(const std::string& name, E* out) {
  for (const auto& [v, n] : name_table<E>())
    if (n == name) {
      *out = v;
      return true;
    }
  return false;
}

template <class E>
std::vector<std::string> names_of() {
  std::vector<std::string> names;
  for (const auto& entry : name_table<E>()) names.push_back(entry.second);
  return names;
}

// "a, b or c".
template <class E>
std::string names_text() {
  const auto names = names_of<E>();
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

// name -> value, for CLI11's CheckedTransformer.
template <class E>
std::map<std::string, E> name_map() {
  std::map<std::string, E> m;
  for (const auto& [v, n] : name_table<E>()) m[n] = v;
  return m;
}

}  // namespace harp::config
