// The run folder's lock: one run per output folder.
#pragma once

#include <memory>
#include <string>

#include "harp/common/status.h"

namespace harp::runtime {

// One run per output folder: the holder has an flock on OUT/.lock, so a second run on the
// same folder is refused (FailedPrecondition) instead of interleaving metrics.jsonl. The
// kernel releases it when the process ends, however it ends. `harp train` takes it on
// rank 0 before the rendezvous.
class RunDirLock {
 public:
  static StatusOr<std::unique_ptr<RunDirLock>> take(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace harp::runtime
