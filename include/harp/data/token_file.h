// Token files (torch-free), told apart by their first bytes:
//   raw    a flat little-endian uint16 array, the nanoGPT `.bin` convention;
//   llm.c  a header of 256 little-endian int32 (magic, version, token count, zeros), then
//          the tokens: magic 20240520 version 1 uint16, magic 20240801 version 7 uint32
//          (vocabularies over 65,535, e.g. LLaMA-3's).
// A raw GPT-2 file cannot pass for an llm.c one: the magic 20240520 reads as the uint16
// pair (55432, 308), and 55432 is no GPT-2 id. `harp data prepare` writes them; the
// runtime reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harp/common/status.h"

namespace harp::data {

// Byte-level tokenisation: one token per byte of `text` (vocabulary 256).
std::vector<std::uint16_t> byte_tokens(const std::string& text);

// Writes tokens atomically (temp + rename). Errors name the file.
Status write_token_file(const std::vector<std::uint16_t>& tokens, const std::string& path);

// Reads a whole raw or uint16 llm.c token file. An odd byte count, an empty file or a
// uint32 file is an error naming it.
StatusOr<std::vector<std::uint16_t>> read_token_file(const std::string& path);

enum class TokenFormat { kRaw16, kLlmc16, kLlmc32 };
const char* token_format_name(TokenFormat format);  // "raw uint16", "llm.c uint16", "llm.c uint32"

inline constexpr std::int32_t kLlmcMagic16 = 20240520, kLlmcVersion16 = 1;
inline constexpr std::int32_t kLlmcMagic32 = 20240801, kLlmcVersion32 = 7;
inline constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

struct Tokens {
  TokenFormat format = TokenFormat::kRaw16;
  std::vector<std::uint32_t> ids;
};

// A token file of any of the formats below, mapped into memory and read in place: a
// 1.5 GiB corpus costs page cache, not a copy widened to 32 bits. The header is checked
// as read_tokens says; the mapping lives as long as the object.
class MappedTokens {
 public:
  static StatusOr<std::unique_ptr<MappedTokens>> open(const std::string& path);
  ~MappedTokens();
  MappedTokens(const MappedTokens&) = delete;
  MappedTokens& operator=(const MappedTokens&) = delete;

  TokenFormat format() const { return format_; }
  std::int64_t size() const { return count_; }
  // The largest id in the file, read a block at a time with each block released from
  // the process's resident memory once read (madvise): a file of any size is scanned in
  // a bounded resident set (docs/file_formats.md, Limits).
  std::uint32_t largest() const;
  std::uint32_t at(std::int64_t i) const {
    const unsigned char* p = tokens_ + i * width_;
    return width_ == 2 ? static_cast<std::uint32_t>(p[0] | (p[1] << 8))
                       : static_cast<std::uint32_t>(p[0] | (p[1] << 8) | (p[2] << 16)) |
                             (static_cast<std::uint32_t>(p[3]) << 24);
  }

 private:
  MappedTokens() = default;
  void* map_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  std::int64_t count_ = 0;
  int width_ = 2;
  TokenFormat format_ = TokenFormat::kRaw16;
};

// Reads a token file of any of the formats above, detected by its header. A known magic
// with another version, or a token count that does not match the file's size, is an
// error naming the file, the header's figures and the fix.
StatusOr<Tokens> read_tokens(const std::string& path);

// The 1 KiB llm.c header of a file of `count` tokens (format kLlmc16 or kLlmc32).
std::string llmc_header(TokenFormat format, std::uint64_t count);
// `v` as `size` little-endian bytes appended to `out` (a token is 2 or 4).
void put_le(std::uint32_t v, int size, std::string* out);

// Writes `ids` in `format` atomically. InvalidArgument for no tokens, or an id that does
// not fit the format (>= 65536 for the uint16 ones).
Status write_tokens(const std::vector<std::uint32_t>& ids, TokenFormat format, const std::string& path);

}  // namespace harp::data
