// Whole-string numbers from the environment and the command line. atoi and strtol read
// "1x" as 1 and "abc" as 0, and a value past the type's range wraps; these read all of the
// text or fail, and check the range before any conversion.
#pragma once

#include <cstdint>
#include <string>

#include "harp/common/status.h"

namespace harp {

// A decimal integer, optionally signed, nothing else (no spaces, no "0.9", no "1e3"), in
// [lo, hi]. The error's message is the rule alone ("is not a whole number", "must be
// between 0 and 65535"): the caller names the variable or flag.
StatusOr<std::int64_t> parse_integer(const std::string& text, std::int64_t lo, std::int64_t hi);

// A finite decimal or scientific number ("0.5", "1e-3"), nothing else; nan, inf, hex and
// trailing text are refused.
StatusOr<double> parse_real(const std::string& text);

}  // namespace harp
