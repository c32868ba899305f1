// The range checks of every numeric flag, with the project's messages: CLI11's own print
// "Value 0 not in range 0.000000 to 1797693134862..." and let nan through a
// NonNegativeNumber. Each reads the flag's text whole (common/parse.h) before CLI11
// converts it, so "-1" never becomes 2^64 - 1 and "1x" never becomes 1.
#pragma once

#include <cstdint>
#include <limits>

#include <CLI/CLI.hpp>

#include "harp/common/quantities.h"

namespace harp::cli {

inline constexpr std::int64_t kMaxCount = std::numeric_limits<int>::max();

// A whole number in [lo, hi].
CLI::Validator whole(std::int64_t lo, std::int64_t hi = kMaxCount);
// A finite number in [lo, hi], or (lo, hi] when lo_open; `unit` follows the bounds.
CLI::Validator real(double lo, double hi, bool lo_open = false, const char* unit = "");
// A finite number in the quantity's range (common/quantities.h).
CLI::Validator in_quantity(const Quantity& q);
// "auto", or a whole number in [lo, hi].
CLI::Validator whole_or_auto(std::int64_t lo, std::int64_t hi);

}  // namespace harp::cli
