// Asynchronous checkpoints: the step waits only while this rank's state is copied (and
// its tp shards gathered); a background thread writes the copy (atomic, checksummed:
// checkpoint.h) while training goes on. A checkpoint is complete, and `latest` names
// it, once every rank's file is written: each rank votes in the end-of-step metrics
// reduction it already takes part in (no extra collective), and rank 0 writes the
// manifest and `latest` (and prunes) when the votes are unanimous. At most one
// checkpoint is in flight: the next one, and the end of the run, first finish it
// (wait, barrier, mark complete).
#pragma once

#include <functional>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "harp/common/status.h"
#include "harp/plan/plan.h"
#include "harp/runtime/exec/executor.h"
#include "harp/runtime/comm/transport.h"

namespace harp::runtime {

struct CheckpointTiming {
  int step = 0;
  double blocked_s = 0;  // what the step waited: the copy (and tp gather), or the whole write when synchronous
  double write_s = 0;    // this rank's file write (serialise, checksum, fsync, rename); 0 when it writes none
};

class CheckpointWriter {
 public:
  // Checkpoints go to DIR/step_N; `keep` as prune_checkpoints (0: all). With
  // `async` false every save writes and completes before it returns. `before_write`,
  // when set, runs on the writer's thread before each write (tests delay it with this).
  CheckpointWriter(std::string dir, int keep, bool async, std::function<void()> before_write = {});
  ~CheckpointWriter();  // waits for a write in flight (its checkpoint stays incomplete)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The run id every checkpoint's files and manifest carry (checkpoint.h, CheckpointId).
  void set_run_id(std::string run) { run_ = std::move(run); }
  // Collective: checkpoint `steps_done` of the executor's parameters and optimizer state.
  Status save(Executor& ex, Transport& comm, int steps_done, const plan::Plan& plan);
  // This rank's vote for the checkpoint in flight: 1 when its write succeeded (or none
  // is in flight), else 0 (still writing, or failed: tally returns the error).
  double vote();
  // With the world sum of every rank's vote(): marks the checkpoint in flight complete
  // when all `world_size` voted 1 (rank 0 writes). Returns this rank's write error.
  Status tally(double votes, const RankLayout& layout);
  // Collective: completes the checkpoint in flight, if any.
  Status finish(Transport& comm);
  bool in_flight() const { return pending_step_ >= 0; }
  // Every save's timing; a write_s is final once its checkpoint is complete.
  const std::vector<CheckpointTiming>& timings() const { return timings_; }
  // The timings of the checkpoints completed since the last call.
  std::vector<CheckpointTiming> take_completed() { return std::exchange(completed_, {}); }

 private:
  Status complete(const RankLayout& layout);
  // Takes the write's status once it is done (waiting for it when `wait`).
  void take_write_status(bool wait);

  std::string dir_;
  int keep_;
  bool async_;
  std::function<void()> before_write_;
  int pending_step_ = -1;
  std::string run_;
  std::string pending_manifest_;
  std::future<Status> write_;
  bool write_checked_ = true;  // the write's status has been taken into write_status_
  Status write_status_;
  std::vector<CheckpointTiming> timings_, completed_;
};

}  // namespace harp::runtime
