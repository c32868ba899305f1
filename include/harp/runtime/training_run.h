// One rank's training run, from a resolved configuration to the run folder's last file:
// the runtime's entry point (`harp train` is its flags and one call to it).
//
// open() checks the token files against the model, applies the device rules (the rank's
// device from LOCAL_RANK, dtype on it, NCCL for CUDA, Gloo's dtypes), sets up the
// process (threads, the counting allocator), takes the run folder's lock (rank 0) and
// meets the other ranks (the transport). run() trains (trainer.h) and rank 0 writes the
// whole run folder: metrics.jsonl, train_config.json, trace.json, measured_plan.json,
// checkpoints and summary.json (the prediction beside the measurement, memory per stage,
// checkpoint timings), and prints the closing lines.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "harp/common/status.h"
#include "harp/config/train_config.h"
#include "harp/launch/worker_env.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"

namespace harp::runtime {

struct RunRequest {
  config::TrainConfig config;                // resolved and validated
  plan::Plan plan;                           // its schedule is the one to run
  std::string plan_file;                     // for summary.json
  plan::ScheduleKind planned_schedule = plan::ScheduleKind::k1F1B;  // the plan file's own
  model::ModelSpec model;
  launch::WorkerEnv env;                     // rank, world, device index, launcher's settings
  bool resume = false;                       // continue from the last checkpoint in the folder
  std::function<bool()> stop_requested;      // polled after each step (SIGUSR1 in harp train)
};

class TrainingRun {
 public:
  // Errors name what does not fit and how to fix it (FailedPrecondition, InvalidArgument,
  // or the rendezvous's failure as a RuntimeFailure thrown).
  static StatusOr<std::unique_ptr<TrainingRun>> open(RunRequest request, std::ostream& log);
  ~TrainingRun();
  // Trains to the end. Throws RuntimeFailure on a peer's failure.
  Status run();

  struct State;  // what open() set up (training_run.cc)

 private:
  explicit TrainingRun(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace harp::runtime
