// The run folder's lock (see run_folder.h).
#include "harp/runtime/io/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace harp::runtime {

StatusOr<std::unique_ptr<RunDirLock>> RunDirLock::take(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir + ": cannot create the output folder: " + ec.message());
  const std::string path = dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(path + ": cannot create the run lock: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      return failed_precondition(dir + ": another run is using this output folder; wait for it to end, or "
                                 "give this run another --out");
    return io_error(path + ": cannot lock: " + std::strerror(err));
  }
  return std::unique_ptr<RunDirLock>(new RunDirLock(fd));
}

RunDirLock::~RunDirLock() { ::close(fd_); }

}  // namespace harp::runtime
