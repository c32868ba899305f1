// Token files: flat little-endian uint16 arrays (nanoGPT's `.bin`). The byte order is
// written explicitly, not by memcpy of host integers, so a file means the same thing on
// every machine that reads it.
#include "harp/data/token_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/stat.h>

#include "harp/common/document.h"

namespace harp::data {
namespace {

// 4 GiB: two billion tokens, held in memory as uint16 (a larger corpus wants sharding).
constexpr std::int64_t kMaxTokenFileBytes = 4ll << 30;

}  // namespace

std::vector<std::uint16_t> byte_tokens(const std::string& text) {
  std::vector<std::uint16_t> tokens;
  tokens.reserve(text.size());
  for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
  return tokens;
}

Status write_token_file(const std::vector<std::uint16_t>& tokens, const std::string& path) {
  // An empty file would be refused by read_token_file; refuse to write one instead of
  // failing later in a training run.
  if (tokens.empty())
    return invalid_argument(shown_path(path) + ": no tokens to write; a token file must hold at least one token");
  std::string bytes;
  bytes.resize(2 * tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    bytes[2 * i] = static_cast<char>(tokens[i] & 0xff);
    bytes[2 * i + 1] = static_cast<char>(tokens[i] >> 8);
  }
  // write_text_file_atomic writes in binary mode, so it is safe for arbitrary bytes.
  return write_text_file_atomic(path, bytes);
}

StatusOr<std::vector<std::uint16_t>> read_token_file(const std::string& path) {
  const std::string fix = "; fix: create it with `harp data prepare --input TEXT --output " + shown_path(path) + "`";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return not_found(shown_path(path) + ": token file does not exist" + fix);
    return io_error(shown_path(path) + ": cannot read token file: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) return invalid_argument(shown_path(path) + ": is a folder, not a token file" + fix);
  // Regular files only (a device or FIFO would read forever or block), bounded size.
  HARP_ASSIGN_OR_RETURN(const std::string bytes, read_text_file(path, kMaxTokenFileBytes));
  if (bytes.empty()) return invalid_argument(shown_path(path) + ": token file is empty (0 bytes)" + fix);
  if (bytes.size() % 2 != 0)
    return invalid_argument(shown_path(path) + ": " + std::to_string(bytes.size()) +
                            " bytes is an odd byte count, but tokens are 2-byte little-endian "
                            "uint16; the file is truncated or not a token file" + fix);
  std::vector<std::uint16_t> tokens(bytes.size() / 2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto lo = static_cast<unsigned char>(bytes[2 * i]);
    const auto hi = static_cast<unsigned char>(bytes[2 * i + 1]);
    tokens[i] = static_cast<std::uint16_t>(lo | (hi << 8));
  }
  return tokens;
}

}  // namespace harp::data
