// A run's checkpoint with the model it was trained as, for the commands that read one whole
// (harp export, harp generate). In harp_train_cli: it links the runtime.
#pragma once

#include <string>

#include "commands.h"
#include "harp/runtime/io/checkpoint.h"

namespace harp::cli {

struct RunCheckpoint {
  model::ModelSpec model;
  runtime::NamedTensors tensors;  // every parameter under its global name (and optimizer state)
  int step = 0;
};

// `checkpoint`: the run's folder (holding checkpoints/) or the checkpoints folder; `plan_file`
// names the model unless `model` (a preset or file) does; `step` 0: the latest. Errors
// name the file and the fix.
StatusOr<RunCheckpoint> read_run_checkpoint(const std::string& checkpoint, const std::string& plan_file,
                                            const std::string& model, int step);

}  // namespace harp::cli
