// SHA-256 (FIPS 180-4), written here so checkpoints carry a strong checksum with no new
// dependency. It detects corruption and truncation; like any unkeyed digest it does not
// stop someone who can rewrite the file from re-signing it (docs/runtime.md).
#pragma once

#include <string>

namespace harp {

// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(const std::string& data);

}  // namespace harp
