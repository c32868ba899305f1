#include "table.h"

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>

namespace harp::cli {

void Table::print(std::ostream& out, const std::string& indent) const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  // Columns of numbers (every cell starts with a digit, a sign or is "-") align right.
  std::vector<bool> right(width.size(), !rows_.empty());
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size() && i < right.size(); ++i) {
      const std::string& c = r[i];
      bool numeric = c == "-" || (!c.empty() && (std::isdigit(static_cast<unsigned char>(c[0])) ||
                                                 ((c[0] == '-' || c[0] == '+') && c.size() > 1)));
      right[i] = right[i] && numeric;
    }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s = indent;
    for (size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < row.size() ? row[i] : "";
      std::string pad(width[i] - std::min(width[i], cell.size()), ' ');
      s += right[i] ? pad + cell : cell + pad;
      if (i + 1 < width.size()) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(header_);
  size_t total = 0;
  for (size_t w : width) total += w;
  out << indent << std::string(total + 2 * (width.size() - 1), '-') << "\n";
  for (const auto& r : rows_) line(r);
}

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

}  // namespace harp::cli
