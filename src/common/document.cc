#include "harp/common/document.h"
#include "harp/common/inputs.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace harp {
namespace {

// The readers note what they opened (inputs.h; defined with the registry below).
void note_input_stat(const std::string& path, const struct stat& st);

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Plain (unquoted) YAML scalars become numbers or booleans when they read as one, so
// `nodes: 2` is the number 2 and `name: "2"` stays a string.
Json yaml_scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  try {
    size_t used = 0;
    long long i = std::stoll(text, &used, 10);
    if (used == text.size()) return i;
  } catch (...) {
  }
  try {
    size_t used = 0;
    double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (...) {
  }
  return text;
}

// Converts with a budget: aliases share nodes, so a small file can expand without
// bound (and an alias can refer to itself); depth and value counts stop both.
struct YamlBudget {
  std::int64_t values = 0;
  std::string error;
};

Json yaml_to_json(const YAML::Node& node, int depth, YamlBudget& budget) {
  if (!budget.error.empty()) return nullptr;
  if (++budget.values > kMaxDocumentValues) {
    budget.error = "expands to more than " + std::to_string(kMaxDocumentValues) +
                   " values (YAML aliases?); write the values out or shorten the file";
    return nullptr;
  }
  if (depth > kMaxDocumentDepth) {
    budget.error = "nests deeper than " + std::to_string(kMaxDocumentDepth) +
                   " levels (or an alias refers to itself); flatten the document";
    return nullptr;
  }
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return yaml_scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item, depth + 1, budget));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          budget.error = "has a key that is not a plain value (line " + std::to_string(kv.first.Mark().line + 1) +
                         "); use names as keys";
          return nullptr;
        }
        if (out.contains(kv.first.Scalar())) {
          const std::string& key = kv.first.Scalar();
          budget.error = "line " + std::to_string(kv.first.Mark().line + 1) + ": the key `" +
                         (key.size() <= 60 ? key : key.substr(0, 60) + "...") +
                         "` appears twice in one mapping; keep one (YAML keeps neither reliably)";
          return nullptr;
        }
        out[kv.first.Scalar()] = yaml_to_json(kv.second, depth + 1, budget);
      }
      return out;
    }
  }
  return nullptr;
}

// The first byte offset that is not valid UTF-8, or -1.
std::int64_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > n) return static_cast<std::int64_t>(i);
    for (size_t k = 1; k < len; ++k)
      if ((p[i + k] >> 6) != 0x2) return static_cast<std::int64_t>(i);
    // Overlong forms, surrogates and code points past U+10FFFF.
    if ((len == 2 && c < 0xc2) || (len == 3 && c == 0xe0 && p[i + 1] < 0xa0) ||
        (len == 3 && c == 0xed && p[i + 1] >= 0xa0) || (len == 4 && c == 0xf0 && p[i + 1] < 0x90) ||
        (len == 4 && (c > 0xf4 || (c == 0xf4 && p[i + 1] >= 0x90))))
      return static_cast<std::int64_t>(i);
    i += len;
  }
  return -1;
}

int line_of(const std::string& s, std::int64_t offset) {
  return 1 + static_cast<int>(std::count(s.begin(), s.begin() + std::min<std::int64_t>(offset, s.size()), '\n'));
}

// Bracket depth outside strings (JSON, YAML flow style) and indentation depth (YAML
// block style): both parsers recurse per level, so a deep document would exhaust the
// stack before they say anything.
Status check_nesting(const std::string& text, const std::string& name, bool yaml) {
  int depth = 0;
  char quote = 0;
  bool line_start = true;
  int indent = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (yaml && line_start) {
      if (c == ' ' || c == '-') {
        if (++indent > 2 * kMaxDocumentDepth)
          return invalid_argument(name + ": line " + std::to_string(line_of(text, i)) + ": nests deeper than " +
                                  std::to_string(kMaxDocumentDepth) + " levels; flatten the document");
        continue;
      }
      line_start = false;
    }
    if (c == '\n') {
      line_start = true;
      indent = 0;
    } else if (c == '"' || (yaml && c == '\'')) {
      quote = c;
    } else if (yaml && c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      --i;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDocumentDepth)
        return invalid_argument(name + ": line " + std::to_string(line_of(text, i)) + ": nests deeper than " +
                                std::to_string(kMaxDocumentDepth) + " levels; flatten the document");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status();
}

Status check_text(const std::string& text, const std::string& name, bool yaml) {
  const std::int64_t bad = invalid_utf8_at(text);
  if (bad >= 0)
    return invalid_argument(name + ": line " + std::to_string(line_of(text, bad)) + " (byte " + std::to_string(bad) +
                            "): not valid UTF-8; save the file as UTF-8 text");
  return check_nesting(text, name, yaml);
}

// Parser messages quote the input; a 5,000-digit number must not make a 5,000-column line.
std::string clip(const std::string& s, size_t most = 200) {
  return s.size() <= most ? s : s.substr(0, most) + "...";
}

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// stat() before open(): a device is refused without being opened at all (opening some
// has side effects); read_text_file's fstat() then guards against a swap in between.
Status check_input_file(const std::string& path, std::int64_t max_bytes) {
  HARP_RETURN_IF_ERROR(check_path_text(path));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return io_error(shown_path(path) + ": cannot open: " + std::strerror(errno) + "; check the path");
  if (!S_ISREG(st.st_mode))
    return io_error(shown_path(path) + ": is " + kind_of(st.st_mode) + "; HARP reads regular files only, give a file");
  if (st.st_size > max_bytes)
    return io_error(shown_path(path) + ": is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                    std::to_string(max_bytes) + " bytes for this kind of file (docs/file_formats.md, Limits)");
  return Status();
}

}  // namespace

Status check_path_text(const std::string& path) {
  if (path.empty()) return invalid_argument("a file name is empty; name a file");
  if (path.find('\0') != std::string::npos)
    return invalid_argument(shown_path(path.substr(0, path.find('\0'))) +
                            "...: the file name contains a NUL byte; no file can have it, remove it");
  return Status();
}

StatusOr<std::string> read_text_file(const std::string& path, std::int64_t max_bytes) {
  HARP_RETURN_IF_ERROR(check_input_file(path, max_bytes));
  // O_NONBLOCK: had the path been swapped for a FIFO since the check, open returns at once.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return io_error(shown_path(path) + ": cannot open: " + std::strerror(errno) + "; check the path");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error(shown_path(path) + ": is not a regular file; HARP reads regular files only, give a file");
  }
  note_input_stat(path, st);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return io_error(shown_path(path) + ": read failed: " + why);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (static_cast<std::int64_t>(text.size()) > max_bytes) {
      ::close(fd);
      return io_error(shown_path(path) + ": grew past the limit of " + std::to_string(max_bytes) + " bytes while being read");
    }
  }
  ::close(fd);
  return text;
}

StatusOr<Json> parse_yaml_text(const std::string& text, const std::string& name) {
  HARP_RETURN_IF_ERROR(check_text(text, name, /*yaml=*/true));
  try {
    const std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (docs.size() > 1)
      return invalid_argument(name + ": holds " + std::to_string(docs.size()) +
                              " YAML documents (separated by ---); a HARP file is one document, keep the first");
    YAML::Node root = docs.empty() ? YAML::Node() : docs[0];
    YamlBudget budget;
    Json out = yaml_to_json(root, 0, budget);
    if (!budget.error.empty()) return invalid_argument(name + ": " + budget.error);
    return out;
  } catch (const YAML::Exception& e) {
    return invalid_argument(name + ": line " + std::to_string(e.mark.line + 1) + ", column " +
                            std::to_string(e.mark.column + 1) + ": not valid YAML (" + e.msg +
                            "); fix the syntax there");
  } catch (const std::exception& e) {
    return invalid_argument(name + ": cannot be read as YAML (" + std::string(e.what()) + "); fix the file");
  }
}

StatusOr<Json> parse_json_text(const std::string& text, const std::string& name) {
  HARP_RETURN_IF_ERROR(check_text(text, name, /*yaml=*/false));
  // A key twice in one object is refused, as in YAML: JSON's readers disagree on which
  // one counts (ours kept the last, Python's json too, others the first).
  std::vector<std::set<std::string>> keys;  // per open object
  std::string duplicate;
  const Json::parser_callback_t unique_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    Json out = Json::parse(text, unique_keys);
    if (!duplicate.empty())
      return invalid_argument(name + ": the key `" + clip(duplicate) +
                              "` appears twice in one object; keep one (JSON readers disagree on which counts)");
    return out;
  } catch (const Json::parse_error& e) {
    return invalid_argument(name + ": not valid JSON at byte " + std::to_string(e.byte) + " (" +
                            clip(e.what()) + "); fix the syntax there");
  } catch (const Json::exception& e) {
    // out_of_range.406: a number too large for a double (e.g. 1e99999).
    return invalid_argument(name + ": " + clip(e.what()) + "; write the number in range");
  }
}

StatusOr<Json> load_document(const std::string& path) {
  HARP_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  if (ends_with(path, ".yaml") || ends_with(path, ".yml")) return parse_yaml_text(text, shown_path(path));
  return parse_json_text(text, shown_path(path));
}

namespace {

struct InputRegistry {
  std::mutex mu;
  bool on = false;
  std::map<std::pair<dev_t, ino_t>, std::string> files;  // (device, inode) -> the name read
};
InputRegistry& inputs_read() {
  static InputRegistry* r = new InputRegistry();  // lives as long as the process
  return *r;
}

void note_input_stat(const std::string& path, const struct stat& st) {
  InputRegistry& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  r.files.emplace(std::make_pair(st.st_dev, st.st_ino), path);
}

}  // namespace

void protect_inputs() {
  InputRegistry& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  r.on = true;
}

void forget_inputs() {
  InputRegistry& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  r.on = false;
  r.files.clear();
}

void note_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) note_input_stat(path, st);
}

std::string input_replaced_by(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  InputRegistry& r = inputs_read();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.on) return "";
  auto it = r.files.find({st.st_dev, st.st_ino});
  return it == r.files.end() ? "" : it->second;
}

Status check_output_path(const std::string& path, const std::vector<std::string>& inputs, const std::string& flag) {
  namespace fs = std::filesystem;
  const std::string who = flag.empty() ? "" : flag + " ";
  if (path.empty()) return invalid_argument(who + "names no file; give a file name");
  if (path.find('\0') != std::string::npos) return check_path_text(path);
  const fs::path target(path);
  if (target.filename().empty() || target.filename() == "." || target.filename() == "..")
    return invalid_argument(who + shown_path(path) + ": names a folder, not a file; add a file name");
  if (target.filename().string().size() > 255)
    return invalid_argument(who + shown_path(path) + ": its name is " +
                            std::to_string(target.filename().string().size()) +
                            " bytes; a file name has at most 255; use a shorter name");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return invalid_argument(who + shown_path(path) + ": is " + kind_of(st.st_mode) +
                              "; HARP writes regular files only (a rename would replace it), give a file name");
    for (const std::string& in : inputs) {
      std::error_code ec;
      if (!in.empty() && fs::equivalent(target, fs::path(in), ec) && !ec)
        return invalid_argument(who + shown_path(path) + ": is the input " + shown_path(in) +
                                "; writing it would destroy what is read, name another file");
    }
    if (const std::string in = input_replaced_by(path); !in.empty())
      return invalid_argument(who + shown_path(path) + ": is the input " + shown_path(in) +
                              " this command read; writing it would destroy what is read, name another file");
  }
  return Status();
}

std::string temporary_path_for(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path target(path);
  const std::string name = ".harp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".tmp";
  return (target.has_parent_path() ? target.parent_path() / name : std::filesystem::path(name)).string();
}

Status write_text_file_atomic(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  HARP_RETURN_IF_ERROR(check_output_path(path));
  const fs::path target(path);
  const fs::path tmp = temporary_path_for(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_error(shown_path(path) + ": cannot open for writing: " + std::strerror(errno) +
                    "; check the folder exists and is writable");
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return io_error(shown_path(path) + ": " + what + ": " + why);
  };
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write failed");
    done += static_cast<size_t>(n);
  }
  // Durable before it becomes visible: the data, then the rename, then the folder entry.
  if (::fsync(fd) != 0) return fail("fsync failed");
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return io_error(shown_path(path) + ": close failed: " + why);
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return io_error(shown_path(path) + ": cannot rename the temporary file into place: " + why);
  }
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status();
}

std::string shown_path(const std::string& path) {
  return path.size() <= 240 ? path : path.substr(0, 160) + "..." + path.substr(path.size() - 60);
}

std::string resolve_relative_to(const std::string& base_file, const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (p.is_absolute()) return path;
  return (fs::path(base_file).parent_path() / p).lexically_normal().string();
}

}  // namespace harp
