// Token files (torch-free): a flat little-endian uint16 array, the nanoGPT `.bin`
// convention. `harp data prepare` writes them; the runtime reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harp/common/status.h"

namespace harp::data {

// Byte-level tokenisation: one token per byte of `text` (vocabulary 256).
std::vector<std::uint16_t> byte_tokens(const std::string& text);

// Writes tokens atomically (temp + rename). Errors name the file.
Status write_token_file(const std::vector<std::uint16_t>& tokens, const std::string& path);

// Reads a whole token file. An odd byte count or an empty file is an error naming it.
StatusOr<std::vector<std::uint16_t>> read_token_file(const std::string& path);

}  // namespace harp::data
