// Loading and writing the project's files. YAML and JSON both load into one JSON tree
// so that every file has one validation path (fields.h). Writes are atomic: a
// temporary file in the same folder, then rename, so no reader sees half a file.
//
// The one hardened input layer (docs/file_formats.md, "Limits"): only regular files are
// read (a directory, FIFO or device is refused before it is opened, so nothing blocks or
// reads forever), at most a size limit, errno's reason in every message; a document must
// be valid UTF-8, nest at most kMaxDocumentDepth levels, and expand (YAML aliases) to at
// most kMaxDocumentValues values; a number the parser cannot hold is refused with its
// line. Every parser exception becomes one message naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harp/common/status.h"

namespace harp {

using Json = nlohmann::json;

inline constexpr std::int64_t kMaxDocumentBytes = 64ll << 20;  // YAML/JSON inputs
inline constexpr int kMaxDocumentDepth = 64;                  // nested lists/maps
inline constexpr std::int64_t kMaxDocumentValues = 1'000'000; // after alias expansion

// Parses `path` as YAML (.yaml/.yml) or JSON (anything else). Errors name the file and
// the line where the parser stopped.
StatusOr<Json> load_document(const std::string& path);

// Parses text already in memory; `name` is used in messages ("<inline>" for tests).
StatusOr<Json> parse_yaml_text(const std::string& text, const std::string& name);
StatusOr<Json> parse_json_text(const std::string& text, const std::string& name);

// Reads a whole regular file of at most `max_bytes` bytes; IoError (with the reason) for
// anything else.
StatusOr<std::string> read_text_file(const std::string& path, std::int64_t max_bytes = kMaxDocumentBytes);

// Writes `text` to `path` atomically (temp + rename). On failure nothing is left behind.
// `path` must pass check_output_path.
Status write_text_file_atomic(const std::string& path, const std::string& text);

// A name a file can have: not empty, no NUL byte.
Status check_path_text(const std::string& path);

// The output policy of every command that writes a file: `path` is a name a file can
// have, whose last part fits the file system (255 bytes); if it exists it is a regular
// file (a directory, device, FIFO or socket, /dev/stdout included, is refused rather than
// replaced by the rename), and it is none of `inputs` (the same file under any name: a
// command must never destroy what it reads). `flag` names the option in messages.
Status check_output_path(const std::string& path, const std::vector<std::string>& inputs = {},
                         const std::string& flag = "");

// A temporary name beside `path` for an atomic write: short whatever `path`'s name, so
// that it fits wherever `path` does.
std::string temporary_path_for(const std::string& path);

// `path` for a message: as is, or its start and end around "..." when very long.
std::string shown_path(const std::string& path);

// Joins a relative `path` to the folder holding `base_file` (absolute paths unchanged).
std::string resolve_relative_to(const std::string& base_file, const std::string& path);

}  // namespace harp
