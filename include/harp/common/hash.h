// Small, stable, non-cryptographic hashing for fingerprints and layer signatures.
#pragma once

#include <cstdint>
#include <string>

namespace harp {

// 64-bit FNV-1a of `text`.
std::uint64_t fnv1a64(const std::string& text);
// fnv1a64 as 16 lowercase hex digits.
std::string hex_fingerprint(const std::string& text);

}  // namespace harp
