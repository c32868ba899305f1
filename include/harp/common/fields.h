// FieldReader: reads one JSON object of a user file and produces the project's error
// message for the first bad field: "<file>: <field path> = <value>: <rule>; fix: <fix>".
//
// Usage: getters return a value (or the default) and remember the first error; finish()
// returns that error, or one naming an unknown key (likely a typo), or ok.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/status.h"

namespace harp {

// Builds the standard message. `value` is printed as given (use json dump for values).
std::string field_message(const std::string& file, const std::string& path,
                          const std::string& value, const std::string& rule,
                          const std::string& fix);
Status field_error(const std::string& file, const std::string& path, const std::string& value,
                   const std::string& rule, const std::string& fix);

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c"; "a" + "[2]" -> "a[2]".
std::string join_path(const std::string& path, const std::string& key);

class FieldReader {
 public:
  // REQUIRES: `node` outlives the reader.
  FieldReader(const Json& node, std::string file, std::string path);

  bool has(const std::string& key) const;
  const Json* get(const std::string& key);  // marks key as known; nullptr if absent
  std::string path_of(const std::string& key) const { return join_path(path_, key); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Required unless a default is given. Numbers must be finite.
  double number(const std::string& key, std::optional<double> def = std::nullopt);
  double positive(const std::string& key, std::optional<double> def = std::nullopt);
  double non_negative(const std::string& key, std::optional<double> def = std::nullopt);
  // In [min_value, max_value] (default: what an int holds), checked before any
  // conversion, so no value wraps or truncates.
  std::int64_t integer(const std::string& key, std::int64_t min_value,
                       std::optional<std::int64_t> def = std::nullopt,
                       std::int64_t max_value = std::numeric_limits<int>::max());
  std::string string(const std::string& key, std::optional<std::string> def = std::nullopt);
  bool boolean(const std::string& key, std::optional<bool> def = std::nullopt);
  // One of `choices`, compared exactly.
  std::string choice(const std::string& key, const std::vector<std::string>& choices,
                     std::optional<std::string> def = std::nullopt);

  // Records `status` as the error if none is recorded yet.
  void fail(Status status);
  void fail(const std::string& key, const std::string& value, const std::string& rule,
            const std::string& fix);
  bool failed() const { return !first_error_.ok(); }

  // First recorded error; else an error for the first key never read; else ok.
  Status finish() const;

 private:
  const Json& node_;
  std::string file_;
  std::string path_;
  std::set<std::string> known_;
  Status first_error_;
};

// The whole number `v` holds when it is one in [lo, hi], else nullopt: checked in the type
// the value has, so nothing wraps (4294967298 is not read as 2) or truncates (2.5).
std::optional<std::int64_t> whole_number_in(const Json& v, std::int64_t lo, std::int64_t hi);

// Checks that `node` is a JSON object; the message names the path and what it is.
Status require_object(const Json& node, const std::string& file, const std::string& path);

}  // namespace harp
