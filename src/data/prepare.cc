// Streaming tokenisation (see prepare.h).
#include "harp/data/prepare.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "harp/common/document.h"

namespace harp::data {
namespace {

// A file descriptor closed (and its temporary file removed unless kept) on every path.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  TempFile() = default;
  TempFile(std::string p, int f, bool k) : path(std::move(p)), fd(f), keep(k) {}
  TempFile(TempFile&& o) noexcept : path(std::move(o.path)), fd(std::exchange(o.fd, -1)), keep(o.keep) {
    o.path.clear();
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  TempFile& operator=(TempFile&&) = delete;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

Status write_all(int fd, const std::string& bytes, const std::string& name) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(shown_path(name) + ": write failed: " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status();
}

// Whether a piece may end at `i`: just after a newline that a non-space character follows.
bool cut_at(const std::string& text, size_t i) {
  const char c = text[i];
  return text[i - 1] == '\n' && c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f';
}

StatusOr<TempFile> open_temp(const std::string& target) {
  TempFile t;
  t.path = temporary_path_for(target);
  t.fd = ::open(t.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (t.fd < 0)
    return io_error(shown_path(target) + ": cannot open for writing: " + std::strerror(errno) +
                    "; check the folder exists and is writable");
  return t;
}

Status finish_temp(TempFile& t, const std::string& target) {
  if (::fsync(t.fd) != 0) return io_error(shown_path(target) + ": fsync failed: " + std::strerror(errno));
  if (::rename(t.path.c_str(), target.c_str()) != 0)
    return io_error(shown_path(target) + ": cannot rename the temporary file into place: " + std::strerror(errno));
  t.keep = true;
  return Status();
}

}  // namespace

StatusOr<PrepareResult> prepare_tokens(const Tokenizer& tokenizer, const PrepareOptions& o) {
  const bool split = o.val_fraction > 0;
  HARP_RETURN_IF_ERROR(check_path_text(o.input));
  HARP_RETURN_IF_ERROR(check_output_path(o.output, {o.input}, "--output"));
  if (split) {
    HARP_RETURN_IF_ERROR(check_output_path(o.val_output, {o.input}, "--val-output"));
    if (std::filesystem::path(o.val_output).lexically_normal() == std::filesystem::path(o.output).lexically_normal())
      return invalid_argument("--val-output " + shown_path(o.val_output) + " is the training output; name another file");
  }
  struct stat st {};
  if (::stat(o.input.c_str(), &st) != 0)
    return io_error(shown_path(o.input) + ": cannot open: " + std::strerror(errno) + "; check the path");
  if (!S_ISREG(st.st_mode))
    return io_error(shown_path(o.input) + ": is not a regular file; HARP reads regular files only, give a file");
  if (st.st_size > kMaxTextBytes)
    return io_error(shown_path(o.input) + ": is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                    std::to_string(kMaxTextBytes) + " bytes for a text to prepare (docs/file_formats.md, Limits); "
                    "split the corpus and prepare each part");
  const int in_fd = ::open(o.input.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (in_fd < 0) return io_error(shown_path(o.input) + ": cannot open: " + std::strerror(errno) + "; check the path");
  TempFile in{"", in_fd, true};
  HARP_ASSIGN_OR_RETURN(TempFile out, open_temp(o.output));
  const bool headed = o.format != TokenFormat::kRaw16;
  const int width = o.format == TokenFormat::kLlmc32 ? 4 : 2;
  if (headed) HARP_RETURN_IF_ERROR(write_all(out.fd, llmc_header(o.format, 0), o.output));

  std::int64_t count = 0, read_bytes = 0;
  std::string text, bytes;
  size_t last_cut = 0;  // the last place in `text` a piece may end (0: none yet)
  std::vector<char> buf(static_cast<size_t>(std::max<std::int64_t>(o.piece_bytes, 1 << 12)));
  auto encode = [&](std::string_view piece) -> Status {
    const std::vector<std::uint32_t> ids = tokenizer.encode(piece);
    bytes.clear();
    for (std::uint32_t id : ids) {
      if (width == 2 && id > 0xffff)
        return invalid_argument(shown_path(o.output) + ": token " + std::to_string(count) + " is " + std::to_string(id) +
                                ", too large for " + token_format_name(o.format) +
                                " tokens; use the llm.c uint32 format (--format llmc)");
      put_le(id, width, &bytes);
      ++count;
    }
    return write_all(out.fd, bytes, o.output);
  };
  for (bool eof = false; !eof;) {
    const ssize_t n = ::read(in.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(shown_path(o.input) + ": read failed: " + std::strerror(errno));
    eof = n == 0;
    const size_t seen = text.size();
    text.append(buf.data(), static_cast<size_t>(n));
    read_bytes += n;
    if (read_bytes > kMaxTextBytes) return io_error(shown_path(o.input) + ": grew past the limit while being read");
    // Each new byte is looked at once. `text` starts where a piece may start, so a
    // stretch runs from the last place to cut (or 0) to the next.
    auto too_long = [&](size_t end) {
      return invalid_argument(shown_path(o.input) + ": " + std::to_string(end - last_cut) + " bytes from byte " +
                              std::to_string(read_bytes - static_cast<std::int64_t>(text.size() - last_cut)) +
                              " on hold no newline followed by text, over the limit of " +
                              std::to_string(o.max_uncut_bytes) +
                              " (docs/file_formats.md, Limits): text is tokenised in pieces cut at such newlines "
                              "and a stretch without one is held whole; break the text into lines");
    };
    for (size_t i = std::max<size_t>(seen, 1); i < text.size(); ++i) {
      if (!cut_at(text, i)) continue;
      if (static_cast<std::int64_t>(i - last_cut) > o.max_uncut_bytes) return too_long(i);
      last_cut = i;
    }
    if (static_cast<std::int64_t>(text.size() - last_cut) > o.max_uncut_bytes) return too_long(text.size());
    const size_t cut = eof ? text.size() : last_cut;
    if (cut == 0 || (!eof && static_cast<std::int64_t>(text.size()) < o.piece_bytes)) continue;
    HARP_RETURN_IF_ERROR(encode(std::string_view(text).substr(0, cut)));
    text.erase(0, cut);
    last_cut = 0;
    if (o.progress) o.progress(read_bytes, st.st_size);
  }
  if (read_bytes == 0) return invalid_argument(shown_path(o.input) + ": input is empty; nothing to tokenise");
  if (count == 0) return invalid_argument(shown_path(o.output) + ": no tokens to write; a token file must hold at least one token");
  PrepareResult r{count, 0};
  if (split) {
    const auto n = static_cast<std::int64_t>(static_cast<double>(count) * o.val_fraction);
    if (n < 1 || n >= count)
      return invalid_argument("--val-fraction " + std::to_string(o.val_fraction) + " of " + std::to_string(count) +
                              " tokens leaves " + (n < 1 ? "no validation token" : "no training token") +
                              "; pass a fraction that keeps both parts non-empty");
    r.tokens = count - n;
    r.val_tokens = n;
  }
  if (headed && (r.tokens >= (1ll << 31) || r.val_tokens >= (1ll << 31)))
    return invalid_argument(shown_path(o.output) + ": " + std::to_string(r.tokens) +
                            " tokens; an llm.c file holds fewer than 2^31 (use --format raw, or split the corpus)");
  const std::int64_t start = headed ? kLlmcHeaderBytes : 0;
  if (split) {
    // The last n tokens, copied from the training file's tail into their own file.
    HARP_ASSIGN_OR_RETURN(TempFile val, open_temp(o.val_output));
    if (headed) HARP_RETURN_IF_ERROR(write_all(val.fd, llmc_header(o.format, r.val_tokens), o.val_output));
    std::int64_t at = start + r.tokens * width;
    const std::int64_t end = start + count * width;
    while (at < end) {
      const ssize_t got = ::pread(out.fd, buf.data(), static_cast<size_t>(std::min<std::int64_t>(
                                                          end - at, static_cast<std::int64_t>(buf.size()))), at);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return io_error(shown_path(o.output) + ": reading back the tokens failed");
      HARP_RETURN_IF_ERROR(write_all(val.fd, std::string(buf.data(), static_cast<size_t>(got)), o.val_output));
      at += got;
    }
    if (::ftruncate(out.fd, start + r.tokens * width) != 0)
      return io_error(shown_path(o.output) + ": truncate failed: " + std::strerror(errno));
    HARP_RETURN_IF_ERROR(finish_temp(val, o.val_output));
  }
  if (headed) {
    const std::string h = llmc_header(o.format, static_cast<std::uint64_t>(r.tokens));
    if (::pwrite(out.fd, h.data(), h.size(), 0) != static_cast<ssize_t>(h.size()))
      return io_error(shown_path(o.output) + ": writing the header failed: " + std::strerror(errno));
  }
  HARP_RETURN_IF_ERROR(finish_temp(out, o.output));
  return r;
}

}  // namespace harp::data
