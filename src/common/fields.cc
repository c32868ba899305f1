#include "harp/common/fields.h"

#include <cmath>

namespace harp {

std::string field_message(const std::string& file, const std::string& path,
                          const std::string& value, const std::string& rule,
                          const std::string& fix) {
  std::string m = file.empty() ? std::string("<input>") : shown_path(file);
  m += ": " + (path.empty() ? std::string("<root>") : path);
  // Values, and names inside rules and fixes, are quoted from the input: keep one
  // readable line whatever their length.
  auto clip = [](const std::string& s, size_t most) { return s.size() <= most ? s : s.substr(0, most) + "..."; };
  if (!value.empty()) m += " = " + clip(value, 120);
  m += ": " + clip(rule, 400);
  if (!fix.empty()) m += "; fix: " + clip(fix, 600);
  return m;
}

Status field_error(const std::string& file, const std::string& path, const std::string& value,
                   const std::string& rule, const std::string& fix) {
  return invalid_argument(field_message(file, path, value, rule, fix));
}

std::string join_path(const std::string& path, const std::string& key) {
  if (path.empty()) return key;
  if (!key.empty() && key[0] == '[') return path + key;
  return path + "." + key;
}

Status require_object(const Json& node, const std::string& file, const std::string& path) {
  if (node.is_object()) return Status();
  return field_error(file, path, node.dump(), "must be a mapping of fields",
                     "write it as `key: value` lines (YAML) or {\"key\": value} (JSON)");
}

FieldReader::FieldReader(const Json& node, std::string file, std::string path)
    : node_(node), file_(std::move(file)), path_(std::move(path)) {
  if (!node_.is_object()) fail(require_object(node_, file_, path_));
}

bool FieldReader::has(const std::string& key) const {
  return node_.is_object() && node_.contains(key) && !node_.at(key).is_null();
}

const Json* FieldReader::get(const std::string& key) {
  known_.insert(key);
  if (!has(key)) return nullptr;
  return &node_.at(key);
}

void FieldReader::fail(Status status) {
  if (first_error_.ok() && !status.ok()) first_error_ = std::move(status);
}

void FieldReader::fail(const std::string& key, const std::string& value, const std::string& rule,
                       const std::string& fix) {
  fail(field_error(file_, path_of(key), value, rule, fix));
}

double FieldReader::number(const std::string& key, std::optional<double> def) {
  const Json* v = get(key);
  if (v == nullptr) {
    if (def) return *def;
    fail(key, "", "is required and missing", "add `" + key + ": <number>`");
    return 0.0;
  }
  if (!v->is_number()) {
    fail(key, v->dump(), "must be a number", "write a plain number such as 2 or 0.5");
    return def.value_or(0.0);
  }
  double d = v->get<double>();
  if (!std::isfinite(d)) {
    fail(key, v->dump(), "must be finite", "write a finite number");
    return 0.0;
  }
  return d;
}

double FieldReader::positive(const std::string& key, std::optional<double> def) {
  double d = number(key, def);
  if (!failed() && !(d > 0.0)) fail(key, Json(d).dump(), "must be greater than 0", "use a positive value");
  return d;
}

double FieldReader::non_negative(const std::string& key, std::optional<double> def) {
  double d = number(key, def);
  if (!failed() && d < 0.0) fail(key, Json(d).dump(), "must not be negative", "use 0 or more");
  return d;
}

std::int64_t FieldReader::integer(const std::string& key, std::int64_t min_value,
                                  std::optional<std::int64_t> def, std::int64_t max_value) {
  const Json* v = get(key);
  if (v == nullptr) {
    if (def) return *def;
    fail(key, "", "is required and missing", "add `" + key + ": <integer>`");
    return min_value;
  }
  bool integral = v->is_number_integer() ||
                  (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>());
  if (!v->is_number() || !integral) {
    fail(key, v->dump(), "must be a whole number", "write an integer such as 4");
    return min_value;
  }
  // Range first, in the type the value has: no silent wrap or truncation.
  const bool too_big = v->is_number_unsigned()
                           ? v->get<std::uint64_t>() > static_cast<std::uint64_t>(max_value)
                           : v->is_number_integer() ? v->get<std::int64_t>() > max_value
                                                    : v->get<double>() > static_cast<double>(max_value);
  if (too_big) {
    fail(key, v->dump(), "must be at most " + std::to_string(max_value),
         "use a value up to " + std::to_string(max_value));
    return min_value;
  }
  if (!v->is_number_integer() && v->get<double>() < static_cast<double>(min_value)) {
    fail(key, v->dump(), "must be at least " + std::to_string(min_value),
         "use " + std::to_string(min_value) + " or more");
    return min_value;
  }
  std::int64_t i = v->is_number_integer() ? v->get<std::int64_t>()
                                          : static_cast<std::int64_t>(v->get<double>());
  if (i < min_value) {
    fail(key, v->dump(), "must be at least " + std::to_string(min_value),
         "use " + std::to_string(min_value) + " or more");
    return min_value;
  }
  return i;
}

std::string FieldReader::string(const std::string& key, std::optional<std::string> def) {
  const Json* v = get(key);
  if (v == nullptr) {
    if (def) return *def;
    fail(key, "", "is required and missing", "add `" + key + ": <text>`");
    return {};
  }
  if (!v->is_string()) {
    fail(key, v->dump(), "must be text", "quote the value");
    return def.value_or("");
  }
  // A NUL byte would end the text early wherever it is used as a name or a path.
  if (v->get_ref<const std::string&>().find('\0') != std::string::npos) {
    fail(key, v->dump(), "contains a NUL byte", "remove the \\u0000 (or \\0) from the text");
    return def.value_or("");
  }
  return v->get<std::string>();
}

bool FieldReader::boolean(const std::string& key, std::optional<bool> def) {
  const Json* v = get(key);
  if (v == nullptr) {
    if (def) return *def;
    fail(key, "", "is required and missing", "add `" + key + ": true` or `false`");
    return false;
  }
  if (!v->is_boolean()) {
    fail(key, v->dump(), "must be true or false", "write true or false");
    return false;
  }
  return v->get<bool>();
}

std::string FieldReader::choice(const std::string& key, const std::vector<std::string>& choices,
                                std::optional<std::string> def) {
  std::string s = string(key, def);
  if (failed()) return s;
  for (const auto& c : choices)
    if (c == s) return s;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  fail(key, Json(s).dump(), "is not one of the allowed values", "use one of: " + list);
  return s;
}

Status FieldReader::finish() const {
  if (!first_error_.ok()) return first_error_;
  if (!node_.is_object()) return Status();
  for (const auto& item : node_.items()) {
    if (known_.count(item.key()) == 0) {
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      return field_error(file_, join_path(path_, item.key()), "", "is not a known field",
                         "remove it or correct the spelling; known fields here: " + list);
    }
  }
  return Status();
}

std::optional<std::int64_t> whole_number_in(const Json& v, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi) || static_cast<std::int64_t>(u) < lo) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    if (i < lo || i > hi) return std::nullopt;
    return i;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || d < static_cast<double>(lo) || d > static_cast<double>(hi))
      return std::nullopt;
    return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

}  // namespace harp
