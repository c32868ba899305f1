// A plain text table for terminal reports (the command line's, and the libraries' that
// render one for it): left-aligned first column, right-aligned numbers, a rule under
// the header.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "harp/common/format.h"

namespace harp {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  // Control characters in a cell are shown escaped (\n, \t, \xNN): one row, one line.
  void add(std::vector<std::string> row);
  void print(std::ostream& out, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace harp
