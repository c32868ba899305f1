// Plain text tables (see table.h).
#include "harp/common/table.h"

#include <algorithm>
#include <cctype>

namespace harp {
namespace {

// A cell as one line of visible text: a control character (a newline in a name read from
// a file) is shown escaped, so no cell breaks the table's rows.
std::string visible(const std::string& cell) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  for (char ch : cell) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20 || c == 0x7f)
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    else
      out += ch;
  }
  return out;
}

}  // namespace

void Table::add(std::vector<std::string> row) {
  for (std::string& cell : row) cell = visible(cell);
  rows_.push_back(std::move(row));
}

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

}  // namespace harp
