// Checkpoints: one file per stage (written by the stage's first replica) holding its
// parameters and optimizer state under global names, plus a manifest. Files are written
// to a temporary name and renamed (atomic), and carry a checksum that loading verifies.
// Global names let a checkpoint load into a different layout: a rank reads every stage
// file the manifest counts and takes the tensors it holds.
//
// Layout: DIR/step_000010/stage_2.bin, DIR/step_000010/manifest.json, DIR/latest
// (the last complete step; written after every stage file exists).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "harp/common/status.h"
#include "harp/runtime/exec/executor.h"

namespace harp::runtime {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What binds a stage file to its checkpoint: the step it was written at, its stage and
// the run (an id drawn when a run starts, kept by the runs that resume it). In the
// file's header, under the checksum; read_checkpoint compares it with the manifest, so a
// valid stage file copied in from another step or run is refused rather than resumed.
struct CheckpointId {
  int step = -1;  // -1: a file without one (written before format 3)
  int stage = -1;
  std::string run;
};

// Writes tensors (contiguous CPU copies) with a trailing SHA-256 of everything before
// it, atomically (fsync'd before the rename).
Status write_tensor_file(const std::string& path, const NamedTensors& tensors, long long counter,
                         const CheckpointId& id = {});
// Reads a tensor file; an error names the file when the checksum or format is wrong. The
// size is checked before anything is read, and the checksum is taken while reading.
StatusOr<NamedTensors> read_tensor_file(const std::string& path, long long* counter, CheckpointId* id = nullptr);

std::string checkpoint_step_dir(const std::string& dir, int step);
// The step recorded in DIR/latest, or NotFound.
StatusOr<int> latest_checkpoint_step(const std::string& dir);
// Marks `step` complete (DIR/latest), atomically.
Status mark_checkpoint_complete(const std::string& dir, int step, const std::string& manifest_json);
// Every tensor of every stage file of the step, by name; each file's CheckpointId must be
// this step, its stage and the manifest's run.
StatusOr<NamedTensors> read_checkpoint(const std::string& dir, int step, long long* optimizer_steps);
// The run id in the manifest of checkpoint `step` ("" if it records none).
std::string checkpoint_run_id(const std::string& dir, int step);
// A fresh run id: 13 hex digits drawn by rank 0 and agreed by every rank of `comm`.
std::string new_run_id(Transport& comm);

// Saving: CheckpointWriter (checkpoint_writer.h), asynchronous or not.
// Removes every step folder of DIR older than the newest `keep` complete checkpoints (a
// complete one has its manifest; older incomplete ones are leftovers of a stopped run).
// Never the one `latest` names, nor anything newer. REQUIRES keep >= 1.
Status prune_checkpoints(const std::string& dir, int keep);
// The run's layout as the manifest records it: model fingerprint, microbatch count and
// size, schedule, every stage's layer range and dp, and the seed. Not the tp degrees.
// Resuming needs only the model, the global batch (microbatches x microbatch_size) and
// the seed to match: the files hold full tensors under global names (tp shards gathered
// when saving, split when loading) and the data order is a function of (seed, step,
// sample), so a checkpoint resumes on other stages, dp, tp, schedule or microbatch split.
Json checkpoint_layout(const plan::Plan& plan, std::uint64_t seed);
// Loads checkpoint `step` of DIR into the executor's parameters and optimizer state
// after checking that the run with `layout` may resume it (FailedPrecondition naming the
// first difference that matters and its fix).
Status load_checkpoint(Executor& ex, const std::string& dir, int step, const Json& layout);

}  // namespace harp::runtime
