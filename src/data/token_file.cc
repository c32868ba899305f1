// Token files: flat little-endian uint16 arrays (nanoGPT's `.bin`) and llm.c's headed
// files. The byte order is written explicitly, not by memcpy of host integers, so a file
// means the same thing on every machine that reads it.
#include "harp/data/token_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harp/common/document.h"

namespace harp::data {
namespace {

// 4 GiB: two billion uint16 tokens, mapped and read in place (a larger corpus wants sharding).
constexpr std::int64_t kMaxTokenFileBytes = 4ll << 30;

}  // namespace

std::vector<std::uint16_t> byte_tokens(const std::string& text) {
  std::vector<std::uint16_t> tokens;
  tokens.reserve(text.size());
  for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
  return tokens;
}

Status write_token_file(const std::vector<std::uint16_t>& tokens, const std::string& path) {
  return write_tokens(std::vector<std::uint32_t>(tokens.begin(), tokens.end()), TokenFormat::kRaw16, path);
}

namespace {

std::string prepare_fix(const std::string& path) {
  return "; fix: create it with `harp data prepare --input TEXT --output " + shown_path(path) + "`";
}

// Maps the file read-only after checking it is a regular file of 1 to kMaxTokenFileBytes
// bytes (a device or FIFO would read forever or block).
Status map_token_file(const std::string& path, void** map, std::size_t* bytes) {
  const std::string fix = prepare_fix(path);
  HARP_RETURN_IF_ERROR(check_path_text(path));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return not_found(shown_path(path) + ": token file does not exist" + fix);
    return io_error(shown_path(path) + ": cannot read token file: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) return invalid_argument(shown_path(path) + ": is a folder, not a token file" + fix);
  if (!S_ISREG(st.st_mode))
    return io_error(shown_path(path) + ": is not a regular file; HARP reads token files from regular files only");
  if (st.st_size > kMaxTokenFileBytes)
    return io_error(shown_path(path) + ": is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                    std::to_string(kMaxTokenFileBytes) + " bytes for a token file (docs/file_formats.md, Limits); "
                    "shard the corpus");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return io_error(shown_path(path) + ": cannot open: " + std::strerror(errno) + "; check the path");
  struct stat fst {};
  if (::fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
    ::close(fd);
    return io_error(shown_path(path) + ": is not a regular file; HARP reads token files from regular files only");
  }
  if (fst.st_size == 0) {
    ::close(fd);
    return invalid_argument(shown_path(path) + ": token file is empty (0 bytes)" + fix);
  }
  void* m = ::mmap(nullptr, static_cast<std::size_t>(fst.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) return io_error(shown_path(path) + ": cannot map the token file: " + std::strerror(err));
  *map = m;
  *bytes = static_cast<std::size_t>(fst.st_size);
  return Status();
}

std::uint32_t le(const unsigned char* b, std::size_t at, int size) {
  std::uint32_t v = 0;
  for (int i = size - 1; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}

}  // namespace

void put_le(std::uint32_t v, int size, std::string* out) {
  for (int i = 0; i < size; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string llmc_header(TokenFormat format, std::uint64_t count) {
  std::string h;
  const bool wide = format == TokenFormat::kLlmc32;
  put_le(static_cast<std::uint32_t>(wide ? kLlmcMagic32 : kLlmcMagic16), 4, &h);
  put_le(static_cast<std::uint32_t>(wide ? kLlmcVersion32 : kLlmcVersion16), 4, &h);
  put_le(static_cast<std::uint32_t>(count), 4, &h);
  h.resize(kLlmcHeaderBytes, '\0');
  return h;
}

const char* token_format_name(TokenFormat format) {
  switch (format) {
    case TokenFormat::kRaw16: return "raw uint16";
    case TokenFormat::kLlmc16: return "llm.c uint16";
    case TokenFormat::kLlmc32: return "llm.c uint32";
  }
  return "?";
}

std::uint32_t MappedTokens::largest() const {
  const std::int64_t block = (std::int64_t{64} << 20) / width_;  // tokens per 64 MiB
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::uint32_t best = 0;
  for (std::int64_t begin = 0; begin < count_; begin += block) {
    const std::int64_t end = std::min(count_, begin + block);
    for (std::int64_t i = begin; i < end; ++i) best = std::max(best, at(i));
    // Whole pages inside this block (a page the next block shares stays): clean pages of a
    // private read-only mapping, so dropping them loses nothing; a later read faults
    // them in again from the file.
    const auto first = (reinterpret_cast<std::uintptr_t>(tokens_ + begin * width_) + page - 1) / page * page;
    const auto last = reinterpret_cast<std::uintptr_t>(tokens_ + end * width_) / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }
  return best;
}

MappedTokens::~MappedTokens() {
  if (map_ != nullptr) ::munmap(map_, mapped_bytes_);
}

StatusOr<std::unique_ptr<MappedTokens>> MappedTokens::open(const std::string& path) {
  std::unique_ptr<MappedTokens> t(new MappedTokens());
  HARP_RETURN_IF_ERROR(map_token_file(path, &t->map_, &t->mapped_bytes_));
  const auto* bytes = static_cast<const unsigned char*>(t->map_);
  const std::size_t n_bytes = t->mapped_bytes_;
  std::size_t start = 0;
  int size = 2;
  const std::uint32_t magic = n_bytes >= 4 ? le(bytes, 0, 4) : 0;
  if (magic == static_cast<std::uint32_t>(kLlmcMagic16) || magic == static_cast<std::uint32_t>(kLlmcMagic32)) {
    const bool wide = magic == static_cast<std::uint32_t>(kLlmcMagic32);
    const std::string what = shown_path(path) + ": an llm.c token file (magic " + std::to_string(magic) + ")";
    if (n_bytes < static_cast<std::size_t>(kLlmcHeaderBytes))
      return invalid_argument(what + " of " + std::to_string(n_bytes) + " bytes, shorter than its " +
                              std::to_string(kLlmcHeaderBytes) + "-byte header; the file is truncated");
    const std::uint32_t version = le(bytes, 4, 4);
    const std::uint32_t want = static_cast<std::uint32_t>(wide ? kLlmcVersion32 : kLlmcVersion16);
    if (version != want)
      return invalid_argument(what + " has version " + std::to_string(version) + "; this magic's version is " +
                              std::to_string(want) + " (" + (wide ? "uint32" : "uint16") +
                              " tokens); rewrite it with llm.c's tools or `harp data prepare`");
    const std::uint64_t n = le(bytes, 8, 4);
    size = wide ? 4 : 2;
    const std::uint64_t body = n_bytes - kLlmcHeaderBytes;
    if (n == 0 || n >= (1ull << 31) || n * size != body)
      return invalid_argument(what + " says " + std::to_string(n) + " tokens (" + std::to_string(n * size) +
                              " bytes) but " + std::to_string(body) +
                              " bytes follow the header; the file is truncated or its header is wrong");
    t->format_ = wide ? TokenFormat::kLlmc32 : TokenFormat::kLlmc16;
    start = kLlmcHeaderBytes;
  } else if (n_bytes % 2 != 0) {
    return invalid_argument(shown_path(path) + ": " + std::to_string(n_bytes) +
                            " bytes is an odd byte count, but tokens are 2-byte little-endian "
                            "uint16 (and no llm.c header starts the file); the file is truncated or not a token file" +
                            prepare_fix(path));
  }
  t->width_ = size;
  t->tokens_ = bytes + start;
  t->count_ = static_cast<std::int64_t>((n_bytes - start) / size);
  return t;
}

StatusOr<Tokens> read_tokens(const std::string& path) {
  HARP_ASSIGN_OR_RETURN(std::unique_ptr<MappedTokens> m, MappedTokens::open(path));
  Tokens t;
  t.format = m->format();
  t.ids.resize(static_cast<std::size_t>(m->size()));
  for (std::int64_t i = 0; i < m->size(); ++i) t.ids[static_cast<std::size_t>(i)] = m->at(i);
  return t;
}

StatusOr<std::vector<std::uint16_t>> read_token_file(const std::string& path) {
  HARP_ASSIGN_OR_RETURN(Tokens t, read_tokens(path));
  if (t.format == TokenFormat::kLlmc32)
    return invalid_argument(shown_path(path) + ": holds uint32 tokens (llm.c, magic " + std::to_string(kLlmcMagic32) +
                            "); this reader takes uint16 ones");
  return std::vector<std::uint16_t>(t.ids.begin(), t.ids.end());
}

Status write_tokens(const std::vector<std::uint32_t>& ids, TokenFormat format, const std::string& path) {
  if (ids.empty())
    return invalid_argument(shown_path(path) + ": no tokens to write; a token file must hold at least one token");
  const int size = format == TokenFormat::kLlmc32 ? 4 : 2;
  std::string bytes;
  if (format != TokenFormat::kRaw16) {
    if (ids.size() >= (1ull << 31))
      return invalid_argument(shown_path(path) + ": " + std::to_string(ids.size()) +
                              " tokens; an llm.c file holds fewer than 2^31");
    bytes = llmc_header(format, ids.size());
  }
  bytes.reserve(bytes.size() + size * ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (size == 2 && ids[i] > 0xffff)
      return invalid_argument(shown_path(path) + ": token " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                              ", too large for " + token_format_name(format) + " tokens; use the llm.c uint32 format");
    put_le(ids[i], size, &bytes);
  }
  // write_text_file_atomic writes in binary mode, so it is safe for arbitrary bytes.
  return write_text_file_atomic(path, bytes);
}

}  // namespace harp::data
