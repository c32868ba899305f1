// Numbers for terminal reports (see format.h).
#include "harp/common/format.h"

#include <cstdarg>
#include <cstdio>

namespace harp {

std::string fmt(const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

std::string fmt_time(double seconds) {
  if (seconds >= 1.0) return fmt("%.3f s", seconds);
  if (seconds >= 1e-3) return fmt("%.2f ms", seconds * 1e3);
  return fmt("%.1f us", seconds * 1e6);
}

std::string fmt_bytes(double bytes) {
  const double kib = 1024.0;
  if (bytes >= kib * kib * kib) return fmt("%.2f GiB", bytes / (kib * kib * kib));
  if (bytes >= kib * kib) return fmt("%.2f MiB", bytes / (kib * kib));
  if (bytes >= kib) return fmt("%.2f KiB", bytes / kib);
  return fmt("%.0f B", bytes);
}

}  // namespace harp
