// The range of every physical and training quantity HARP reads, in one table: what a real
// cluster or run can have (docs/file_formats.md, "Ranges"). A value outside is refused by
// the reader with the quantity's name, range and unit, so that nothing downstream plans
// with a 1e-300 Gbit/s link or prints a 300-digit time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harp/common/fields.h"
#include "harp/common/status.h"

namespace harp {

struct Quantity {
  const char* what;     // "link bandwidth": for messages and the docs' table
  const char* unit;     // "Gbit/s" ("" for a plain number)
  double min;           // inclusive unless min_exclusive
  double max;           // inclusive
  bool min_exclusive;   // (min, max]: e.g. a learning rate above 0
  const char* example;  // a typical value, for the fix
};

namespace quantity {
// Clusters (cluster files, and the figures plans and profiles carry from them).
inline constexpr Quantity kBandwidthGbps{"link bandwidth", "Gbit/s", 1e-3, 1e5, false, "100"};
inline constexpr Quantity kLatencyS{"link latency", "s", 0, 10, false, "5e-6"};
inline constexpr Quantity kPeakTflops{"device peak", "TFLOP/s", 1e-3, 1e5, false, "312"};
inline constexpr Quantity kMemoryGib{"device memory", "GiB", 1e-3, 65536, false, "80"};
inline constexpr Quantity kMemoryBandwidthGbs{"device memory bandwidth", "GB/s", 1e-3, 1e6, false, "2039"};
inline constexpr Quantity kSlowdown{"emulated slowdown", "x", 1, 1000, false, "2"};
// Measured and predicted figures (profiles, plans, traces, run summaries).
inline constexpr Quantity kSeconds{"time", "s", 0, 1e6, false, "0.01"};
// A run's iteration (a summary's predicted and measured seconds): a microsecond at least,
// so that no ratio of two of them prints as a 300-digit figure.
inline constexpr Quantity kPositiveSeconds{"iteration time", "s", 1e-6, 1e6, false, "0.5"};
// A measured difference of times: a stage's fixed cost per call (profile DBs), which noise
// or a range slower than its layers may make negative.
inline constexpr Quantity kFixedSeconds{"fixed time per call", "s", -1e3, 1e3, false, "0.0002"};
inline constexpr Quantity kBytes{"size", "bytes", 0, 1e18, false, "1048576"};
inline constexpr Quantity kSecondsPerParamByte{"optimizer time per parameter byte", "s/byte", 0, 1e-3, false,
                                               "4e-9"};
inline constexpr Quantity kTraceMicros{"trace event time", "us", 0, 1e12, false, "1500"};
// Training (the job's training: section and harp train's flags).
inline constexpr Quantity kLearningRate{"learning rate", "", 0, 10, true, "3e-4"};
inline constexpr Quantity kMinLearningRate{"final learning rate", "", 0, 10, false, "3e-5"};
inline constexpr Quantity kWeightDecay{"weight decay", "", 0, 10, false, "0.1"};
inline constexpr Quantity kGradClip{"gradient clipping norm", "", 0, 1e6, false, "1.0"};
inline constexpr Quantity kTimeoutS{"timeout", "s", 1e-3, 86400, false, "60"};
inline constexpr Quantity kValFraction{"validation fraction", "", 0, 0.5, true, "0.05"};
}  // namespace quantity

// Every quantity above, in order, with the name of its constant (for the docs' table test).
struct NamedQuantity {
  const char* name;
  const Quantity* q;
};
const std::vector<NamedQuantity>& all_quantities();

// "between 0.001 and 100000 Gbit/s", "above 0 and at most 10".
std::string range_text(const Quantity& q);
bool in_range(const Quantity& q, double v);

// "nan", "inf", or the shortest text of v.
std::string number_text(double v);

// "a learning rate must be above 0 and at most 10": the rule every message about q states.
std::string quantity_rule(const Quantity& q);

// The standard field message for a value outside q's range (file, path, value, rule, fix).
Status quantity_error(const Quantity& q, double v, const std::string& file, const std::string& path);
Status check_quantity(const Quantity& q, double v, const std::string& file, const std::string& path);

// Reads `key` as a number in q's range; the default (if given) is not checked.
double read_quantity(FieldReader& r, const std::string& key, const Quantity& q,
                     std::optional<double> def = std::nullopt);

}  // namespace harp
