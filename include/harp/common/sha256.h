// SHA-256 (FIPS 180-4), written here so checkpoints carry a strong checksum with no new
// dependency. It detects corruption and truncation; like any unkeyed digest it does not
// stop someone who can rewrite the file from re-signing it (docs/runtime.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace harp {

// The same digest over data given in pieces (a file read in chunks).
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  std::string hex();  // finishes; the object is spent

 private:
  std::uint32_t h_[8];
  unsigned char block_[64];
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(const std::string& data);

}  // namespace harp
