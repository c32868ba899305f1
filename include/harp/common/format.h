// Numbers as the terminal reports print them, shared by the command line and the
// libraries that report a whole job (the elastic controller, a training run).
#pragma once

#include <string>

namespace harp {

// printf-style formatting into a std::string.
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
// Seconds as "12.34 ms" (or "1.234 s" from one second up).
std::string fmt_time(double seconds);
// Bytes as GiB/MiB/KiB with two decimals.
std::string fmt_bytes(double bytes);

}  // namespace harp
