#include "harp/common/quantities.h"

#include <cmath>
#include <sstream>

namespace harp {

const std::vector<NamedQuantity>& all_quantities() {
  using namespace quantity;
  static const std::vector<NamedQuantity> all = {
      {"kBandwidthGbps", &kBandwidthGbps}, {"kLatencyS", &kLatencyS}, {"kPeakTflops", &kPeakTflops},
      {"kMemoryGib", &kMemoryGib}, {"kMemoryBandwidthGbs", &kMemoryBandwidthGbs}, {"kSlowdown", &kSlowdown},
      {"kSeconds", &kSeconds}, {"kPositiveSeconds", &kPositiveSeconds},
      {"kFixedSeconds", &kFixedSeconds}, {"kBytes", &kBytes},
      {"kSecondsPerParamByte", &kSecondsPerParamByte}, {"kTraceMicros", &kTraceMicros},
      {"kLearningRate", &kLearningRate}, {"kMinLearningRate", &kMinLearningRate}, {"kWeightDecay", &kWeightDecay},
      {"kGradClip", &kGradClip}, {"kTimeoutS", &kTimeoutS}, {"kValFraction", &kValFraction}};
  return all;
}

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

std::string range_text(const Quantity& q) {
  const std::string unit = *q.unit != '\0' ? std::string(" ") + q.unit : "";
  return (q.min_exclusive ? "above " + number_text(q.min) + " and at most " : "between " + number_text(q.min) + " and ") +
         number_text(q.max) + unit;
}

bool in_range(const Quantity& q, double v) {
  return std::isfinite(v) && (q.min_exclusive ? v > q.min : v >= q.min) && v <= q.max;
}

std::string quantity_rule(const Quantity& q) {
  const bool vowel = std::string("aeiou").find(q.what[0]) != std::string::npos;
  return std::string(vowel ? "an " : "a ") + q.what + " must be " + range_text(q);
}

Status quantity_error(const Quantity& q, double v, const std::string& file, const std::string& path) {
  return field_error(file, path, number_text(v), quantity_rule(q),
                     std::string("use a value a real cluster or run can have, e.g. ") + q.example +
                         " (docs/file_formats.md, Ranges)");
}

Status check_quantity(const Quantity& q, double v, const std::string& file, const std::string& path) {
  return in_range(q, v) ? Status() : quantity_error(q, v, file, path);
}

double read_quantity(FieldReader& r, const std::string& key, const Quantity& q, std::optional<double> def) {
  const bool given = r.has(key);
  // -0.0 is zero: read as 0, so that every rule and message sees (and prints) one zero.
  const double v = r.number(key, def) + 0.0;
  if (given && !r.failed() && !in_range(q, v)) r.fail(quantity_error(q, v, r.file(), r.path_of(key)));
  return v;
}

}  // namespace harp
