#include "harp/common/parse.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace harp {

StatusOr<std::int64_t> parse_integer(const std::string& text, std::int64_t lo, std::int64_t hi) {
  const std::string range = "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  if (i == text.size()) return invalid_argument("is not a whole number; it " + range);
  for (size_t k = i; k < text.size(); ++k)
    if (text[k] < '0' || text[k] > '9') return invalid_argument("is not a whole number; it " + range);
  // 19 digits hold every int64; more is out of any range asked here.
  if (text.size() - i > 18) return invalid_argument(range);
  const std::int64_t v = std::strtoll(text.c_str(), nullptr, 10);
  if (v < lo || v > hi) return invalid_argument(range);
  return v;
}

StatusOr<double> parse_real(const std::string& text) {
  if (text.empty()) return invalid_argument("is not a number");
  for (char c : text)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'))
      return invalid_argument("is not a number");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return invalid_argument("is not a number");
  if (!std::isfinite(v) || errno == ERANGE) return invalid_argument("is out of range for a number");
  return v;
}

}  // namespace harp
