// safetensors reading and writing (see safetensors.h).
#include "harp/data/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "harp/common/document.h"

namespace harp::data {
namespace {

namespace fs = std::filesystem;

std::string where(const std::string& path, const std::string& tensor) {
  return shown_path(path) + (tensor.empty() ? std::string() : ": tensor \"" + tensor.substr(0, 80) + "\"");
}

Status bad(const std::string& path, const std::string& tensor, const std::string& rule) {
  return invalid_argument(where(path, tensor) + ": " + rule);
}

std::uint64_t read_le64(const unsigned char* b) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

void put_le64(std::uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// numel x size, or -1 when it does not fit in 63 bits (or a dimension is negative).
std::int64_t byte_count(const std::vector<std::int64_t>& shape, int size) {
  std::int64_t n = size;
  for (std::int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

StatusOr<std::uint64_t> offset(const Json& v, const std::string& path, const std::string& name) {
  if (!v.is_number_unsigned())
    return bad(path, name, "data_offsets holds " + v.dump().substr(0, 40) + "; offsets are non-negative integers");
  return v.get<std::uint64_t>();
}

StatusOr<SafetensorsEntry> parse_entry(const std::string& name, const Json& v, const std::string& path) {
  if (!v.is_object())
    return bad(path, name, "is " + v.dump().substr(0, 40) + "; each tensor is an object with dtype, shape and "
                           "data_offsets");
  SafetensorsEntry e;
  e.name = name;
  const auto dtype = v.find("dtype");
  if (dtype == v.end() || !dtype->is_string()) return bad(path, name, "has no dtype string");
  e.dtype = dtype->get<std::string>();
  const int size = safetensors_dtype_size(e.dtype);
  if (size == 0)
    return bad(path, name, "dtype \"" + e.dtype.substr(0, 20) + "\" is unknown; known: F64 F32 F16 BF16 I64 I32 I16 "
                           "I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2");
  const auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array()) return bad(path, name, "has no shape list");
  for (const Json& d : *shape) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(1) << 62)
      return bad(path, name, "shape holds " + d.dump().substr(0, 40) + "; dimensions are non-negative integers");
    e.shape.push_back(d.get<std::int64_t>());
  }
  const auto offsets = v.find("data_offsets");
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2)
    return bad(path, name, "has no data_offsets [begin, end]");
  HARP_ASSIGN_OR_RETURN(e.begin, offset((*offsets)[0], path, name));
  HARP_ASSIGN_OR_RETURN(e.end, offset((*offsets)[1], path, name));
  if (e.end < e.begin)
    return bad(path, name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                               "] end before they begin");
  const std::int64_t bytes = byte_count(e.shape, size);
  if (bytes < 0 || static_cast<std::uint64_t>(bytes) != e.end - e.begin)
    return bad(path, name, "shape " + shape->dump().substr(0, 60) + " of " + e.dtype + " is " +
                               (bytes < 0 ? std::string("too large") : std::to_string(bytes) + " bytes") +
                               " but data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

int safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},      {"I16", 2},     {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

StatusOr<SafetensorsFile> read_safetensors_header(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return io_error(shown_path(path) + ": cannot open: no such file");
  if (!fs::is_regular_file(st)) return io_error(shown_path(path) + ": not a regular file");
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) return io_error(shown_path(path) + ": cannot read its size: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(shown_path(path) + ": cannot open for reading");
  if (size < 8)
    return bad(path, "", "is " + std::to_string(size) + " bytes, shorter than the 8-byte header length; not a "
                         "safetensors file");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  if (!in) return io_error(shown_path(path) + ": cannot read the header length");
  const std::uint64_t n = read_le64(len);
  if (n > size - 8)
    return bad(path, "", "the header length " + std::to_string(n) + " is larger than the " + std::to_string(size - 8) +
                         " bytes after it; the file is truncated or not a safetensors file");
  if (n > kMaxSafetensorsHeader)
    return bad(path, "", "the header is " + std::to_string(n) + " bytes, more than the " +
                         std::to_string(kMaxSafetensorsHeader) + " allowed");
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  if (!in) return io_error(shown_path(path) + ": cannot read the " + std::to_string(n) + "-byte header");
  // The reference writer pads with spaces; JSON allows trailing whitespace.
  HARP_ASSIGN_OR_RETURN(Json doc, parse_json_text(header, shown_path(path) + " (header)"));
  if (!doc.is_object()) return bad(path, "", "the header is not a JSON object of tensors");
  SafetensorsFile f;
  f.path = path;
  f.data_start = 8 + n;
  for (const auto& [name, v] : doc.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return bad(path, "", "__metadata__ is not an object of strings");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) return bad(path, "", "__metadata__ \"" + k.substr(0, 40) + "\" is not a string");
        f.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    if (name.empty()) return bad(path, "", "a tensor has an empty name");
    HARP_ASSIGN_OR_RETURN(SafetensorsEntry e, parse_entry(name, v, path));
    f.tensors.push_back(std::move(e));
  }
  std::sort(f.tensors.begin(), f.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const std::uint64_t data = size - f.data_start;
  std::uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& t : f.tensors) {
    if (t.begin < covered)
      return bad(path, t.name, "bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") overlap \"" +
                                   previous->name.substr(0, 80) + "\" (ending at " + std::to_string(covered) + ")");
    if (t.begin > covered)
      return bad(path, t.name, "starts at byte " + std::to_string(t.begin) + " but the data before it ends at " +
                                   std::to_string(covered) + "; a safetensors file has no holes");
    covered = t.end;
    previous = &t;
  }
  if (covered > data)
    return bad(path, previous->name, "ends at byte " + std::to_string(covered) + " of the data but the file holds " +
                                         std::to_string(data) + " data bytes; the file is truncated");
  if (covered < data)
    return bad(path, "", "the tensors cover " + std::to_string(covered) + " of the " + std::to_string(data) +
                         " data bytes; trailing bytes belong to no tensor");
  return f;
}

StatusOr<std::string> read_tensor_bytes(const SafetensorsFile& file, const SafetensorsEntry& entry) {
  std::ifstream in(file.path, std::ios::binary);
  if (!in) return io_error(shown_path(file.path) + ": cannot open for reading");
  std::string bytes(entry.end - entry.begin, '\0');
  in.seekg(static_cast<std::streamoff>(file.data_start + entry.begin));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in)
    return io_error(where(file.path, entry.name) + ": cannot read its " + std::to_string(bytes.size()) +
                    " bytes (the file changed since its header was read?)");
  return bytes;
}

Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  std::set<std::string> names;
  std::uint64_t at = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      return bad(path, t.name, "is not a tensor name (empty or __metadata__)");
    if (!names.insert(t.name).second) return bad(path, t.name, "is written twice");
    const int size = safetensors_dtype_size(t.dtype);
    if (size == 0) return bad(path, t.name, "dtype \"" + t.dtype + "\" is unknown");
    const std::int64_t bytes = byte_count(t.shape, size);
    if (bytes < 0 || static_cast<std::uint64_t>(bytes) != t.bytes.size())
      return bad(path, t.name, "holds " + std::to_string(t.bytes.size()) + " bytes but its shape needs " +
                                   std::to_string(bytes));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string head;
  put_le64(text.size(), &head);
  head += text;
  HARP_RETURN_IF_ERROR(check_output_path(path));
  const std::string tmp = temporary_path_for(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(shown_path(path) + ": cannot create " + shown_path(tmp));
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    for (const auto& t : tensors) out.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      return io_error(shown_path(path) + ": writing failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return io_error(shown_path(path) + ": cannot rename the written file into place: " + ec.message());
  }
  return Status();
}

}  // namespace harp::data
