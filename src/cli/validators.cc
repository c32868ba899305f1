#include "validators.h"

#include "harp/common/parse.h"

namespace harp::cli {
namespace {

std::string shown(const std::string& text) { return text.size() <= 40 ? text : text.substr(0, 40) + "..."; }

// A finite number in q's range; `rule` is what a value outside it is told.
CLI::Validator number_in(const Quantity& q, const std::string& rule) {
  return CLI::Validator(
      [q, rule](std::string& text) -> std::string {
        auto v = parse_real(text);
        if (!v.ok()) return shown(text) + " " + v.status().message();
        return in_range(q, *v) ? std::string() : shown(text) + ": " + rule;
      },
      (q.min_exclusive ? "(" : "[") + number_text(q.min) + ", " + number_text(q.max) + "]");
}

}  // namespace

CLI::Validator whole(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        auto v = parse_integer(text, lo, hi);
        return v.ok() ? std::string() : shown(text) + " " + v.status().message();
      },
      std::to_string(lo) + ".." + (hi == kMaxCount ? std::string("") : std::to_string(hi)));
}

CLI::Validator real(double lo, double hi, bool lo_open, const char* unit) {
  const Quantity q{"value", unit, lo, hi, lo_open, ""};
  return number_in(q, "must be " + range_text(q));
}

CLI::Validator in_quantity(const Quantity& q) { return number_in(q, quantity_rule(q)); }

CLI::Validator whole_or_auto(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        if (text == "auto") return std::string();
        auto v = parse_integer(text, lo, hi);
        return v.ok() ? std::string() : shown(text) + " " + v.status().message() + ", or auto";
      },
      std::to_string(lo) + ".." + std::to_string(hi) + " or auto");
}

}  // namespace harp::cli
