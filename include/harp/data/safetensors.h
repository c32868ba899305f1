// safetensors files (torch-free): an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str:
// str}}, then the tensors' raw little-endian bytes, offsets relative to the end of the
// header. The format of Hugging Face checkpoints (model.safetensors, or shards
// model-0000k-of-0000n.safetensors with model.safetensors.index.json).
//
// Reading is checked as the reference implementation checks it, so a malformed or
// hostile file gets one message naming the file, the tensor and the rule: the header
// length within the file and at most kMaxSafetensorsHeader; the header valid JSON of
// objects; every dtype known; shape x element size = end - begin; the ranges inside the
// data, not overlapping, and covering it without holes. Only the header is read up front;
// read_tensor_bytes reads one tensor's bytes, so a rank reads only its own tensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harp/common/status.h"

namespace harp::data {

inline constexpr std::uint64_t kMaxSafetensorsHeader = 100ull << 20;  // as the reference reader

// Bytes per element of a safetensors dtype name (F64, F32, F16, BF16, I64, I32, I16, I8,
// U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2); 0 if unknown.
int safetensors_dtype_size(const std::string& dtype);

struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // in the data section
  std::int64_t numel() const;
};

struct SafetensorsFile {
  std::string path;
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;  // 8 + header length
  const SafetensorsEntry* find(const std::string& name) const;
};

// Reads and checks the header of `path` (InvalidArgument naming the rule broken, IoError
// for an unreadable file).
StatusOr<SafetensorsFile> read_safetensors_header(const std::string& path);

// The raw bytes of one tensor of `file` (little-endian, row-major).
StatusOr<std::string> read_tensor_bytes(const SafetensorsFile& file, const SafetensorsEntry& entry);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;  // numel x dtype size
};

// Writes tensors (in the given order) and metadata atomically (temp + rename). The header
// is padded with spaces to a multiple of 8 bytes, as the reference writer does.
// InvalidArgument for an unknown dtype, a byte count that does not match the shape, a
// duplicate or empty name.
Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace harp::data
