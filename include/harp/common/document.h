// Loading and writing the project's files. YAML and JSON both load into one JSON tree
// so that every file has one validation path (fields.h). Writes are atomic: a
// temporary file in the same folder, then rename, so no reader sees half a file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harp/common/status.h"

namespace harp {

using Json = nlohmann::json;

// Parses `path` as YAML (.yaml/.yml) or JSON (anything else). Errors name the file and
// the line where the parser stopped.
StatusOr<Json> load_document(const std::string& path);

// Parses text already in memory; `name` is used in messages ("<inline>" for tests).
StatusOr<Json> parse_yaml_text(const std::string& text, const std::string& name);
StatusOr<Json> parse_json_text(const std::string& text, const std::string& name);

// Reads a whole file.
StatusOr<std::string> read_text_file(const std::string& path);

// Writes `text` to `path` atomically (temp + rename). On failure nothing is left behind.
Status write_text_file_atomic(const std::string& path, const std::string& text);

// Joins a relative `path` to the folder holding `base_file` (absolute paths unchanged).
std::string resolve_relative_to(const std::string& base_file, const std::string& path);

}  // namespace harp
