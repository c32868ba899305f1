#include "harp/common/output_folder.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "harp/common/document.h"
#include "harp/common/inputs.h"

namespace harp {
namespace fs = std::filesystem;
namespace {

const char* const kPartial = ".harp-partial-";
const char* const kOld = ".harp-old-";

// `.NAME.harp-partial-PID` beside `target`.
std::string sibling(const fs::path& target, const char* kind, long pid) {
  return (target.parent_path() / ("." + target.filename().string() + kind + std::to_string(pid))).string();
}

// Removes the staging and old folders of earlier writes to `target` whose process is gone
// (killed part-way; a live one's are left alone).
void remove_stale(const fs::path& target) {
  const std::string prefix = "." + target.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    for (const char* kind : {kPartial, kOld}) {
      const std::string head = prefix + kind;
      if (name.rfind(head, 0) != 0 || name.size() == head.size()) continue;
      const std::string digits = name.substr(head.size());
      if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const long pid = std::stol(digits);
      if (pid == static_cast<long>(::getpid()) || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
}

// `from` into `to` (which does not exist) sharing the files' data: folders are made anew,
// files hard-linked (copied where the file system cannot link), links copied as links.
Status carry(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(from, ec);
  if (ec) return io_error(shown_path(from.string()) + ": cannot read: " + ec.message());
  if (fs::is_symlink(st)) {
    fs::copy_symlink(from, to, ec);
  } else if (fs::is_directory(st)) {
    fs::create_directory(to, ec);
    for (const auto& e : fs::directory_iterator(from, ec)) {
      if (ec) break;
      HARP_RETURN_IF_ERROR(carry(e.path(), to / e.path().filename()));
    }
  } else if (fs::is_regular_file(st)) {
    fs::create_hard_link(from, to, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(from, to, ec);
    }
  } else {
    return failed_precondition(shown_path(from.string()) +
                               ": is neither a file, a folder nor a link, and cannot be carried into the new "
                               "output; move it away, or write to an empty folder");
  }
  if (ec)
    return io_error(shown_path(from.string()) + ": cannot carry it into the new output (" + ec.message() +
                    "); the old folder is unchanged");
  return Status();
}

}  // namespace

StatusOr<OutputFolder> OutputFolder::begin(const std::string& dir, Owned owned) {
  HARP_RETURN_IF_ERROR(check_path_text(dir));
  std::error_code ec;
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();           // "out/" names "out"
  if (fs::is_symlink(target, ec)) target = fs::canonical(target, ec);  // the folder it names
  if (target.empty() || target.filename() == "." || target.filename() == "..")
    target = fs::absolute(target, ec).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  if (target.parent_path().empty()) target = fs::path(".") / target;
  if (fs::exists(target, ec) && !fs::is_directory(target, ec))
    return invalid_argument(shown_path(dir) + ": is a file; the output is a folder: name a new or existing folder");
  if (target.filename().empty() || target == target.root_path())
    return invalid_argument(shown_path(dir) + ": cannot be replaced as a whole; name a folder inside it");
  // The folder this process stands in (or one above it) is not swapped out from under it,
  // nor copied whole into a new one: `-o .` names a new folder instead.
  if (fs::exists(target, ec)) {
    const fs::path here = fs::canonical(fs::current_path(ec), ec), there = fs::canonical(target, ec);
    const auto rel = here.lexically_relative(there);
    if (!rel.empty() && *rel.begin() != "..")
      return invalid_argument(shown_path(dir) +
                              ": is the current folder or holds it; name a folder for the output "
                              "(such as " +
                              shown_path(dir) + "/export)");
  }
  fs::create_directories(target.parent_path(), ec);
  if (ec) return io_error(shown_path(target.parent_path().string()) + ": cannot create the folder: " + ec.message());
  remove_stale(target);
  const std::string staging = sibling(target, kPartial, ::getpid());
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec) || ec)
    return io_error(shown_path(target.parent_path().string()) + ": cannot write a folder there (" +
                    (ec ? ec.message() : std::string("exists")) + "); check the folder is writable");
  return OutputFolder(target.string(), staging, std::move(owned));
}

OutputFolder::OutputFolder(OutputFolder&& other) noexcept
    : target_(std::move(other.target_)),
      staging_(std::move(other.staging_)),
      owned_(std::move(other.owned_)),
      done_(other.done_) {
  other.done_ = true;  // the moved-from object removes nothing
}

OutputFolder::~OutputFolder() {
  if (done_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

Status OutputFolder::commit() {
  std::error_code ec;
  const fs::path target(target_), staging(staging_);
  const bool existed = fs::is_directory(target, ec);
  if (existed) {
    for (const auto& e : fs::directory_iterator(target, ec)) {
      const std::string name = e.path().filename().string();
      if (owned_(name)) {
        // The command's own kind of entry: replaced, unless it is a file this command read.
        if (const std::string input = input_replaced_by(e.path().string()); !input.empty())
          return invalid_argument(shown_path(e.path().string()) + ": is an input of this command (" +
                                  shown_path(input) + ") and the output would replace it; write to another folder");
        continue;
      }
      if (fs::exists(staging / name)) continue;  // the command wrote one of its own
      HARP_RETURN_IF_ERROR(carry(e.path(), staging / name));
    }
    if (ec) return io_error(shown_path(target_) + ": cannot list the folder: " + ec.message());
  }
  // Durable before visible: the staged files were written and synced by their writers.
  if (!existed) {
    if (::rename(staging_.c_str(), target_.c_str()) != 0)
      return io_error(shown_path(target_) + ": cannot put the output in place: " + std::strerror(errno));
  } else if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS)
      return io_error(shown_path(target_) + ": cannot put the output in place: " + std::strerror(errno));
    // A file system without the exchange: the old folder aside, then the new in place (a
    // kill between the two leaves the old one beside the target, named .NAME.harp-old-PID).
    const std::string old = sibling(target, kOld, ::getpid());
    if (::rename(target_.c_str(), old.c_str()) != 0)
      return io_error(shown_path(target_) + ": cannot move the old output aside: " + std::strerror(errno));
    if (::rename(staging_.c_str(), target_.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      ::rename(old.c_str(), target_.c_str());
      return io_error(shown_path(target_) + ": cannot put the output in place: " + why);
    }
    fs::remove_all(old, ec);
    done_ = true;
    return Status();
  }
  // After the exchange the staging name holds the old folder.
  done_ = true;
  fs::remove_all(staging, ec);
  if (const int fd = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  return Status();
}

}  // namespace harp
