// A plain text table for terminal reports: left-aligned first column, right-aligned
// numbers, a rule under the header.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace harp::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// printf-style formatting into a std::string.
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
// Seconds as "12.34 ms" (or "1.234 s" from one second up).
std::string fmt_time(double seconds);
// Bytes as GiB/MiB/KiB with two decimals.
std::string fmt_bytes(double bytes);

}  // namespace harp::cli
