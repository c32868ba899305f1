#include "harp/runtime/io/checkpoint_writer.h"

#include <chrono>
#include <filesystem>

#include "harp/runtime/io/checkpoint.h"

namespace harp::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string dir, int keep, bool async, std::function<void()> before_write)
    : dir_(std::move(dir)), keep_(keep), async_(async), before_write_(std::move(before_write)) {}

CheckpointWriter::~CheckpointWriter() {
  if (write_.valid()) write_.wait();
}

Status CheckpointWriter::save(Executor& ex, Transport& comm, int steps_done, const plan::Plan& plan) {
  const auto t0 = std::chrono::steady_clock::now();  // the wait for a previous write counts
  HARP_RETURN_IF_ERROR(finish(comm));
  const RankLayout& l = comm.layout();
  const std::string sd = checkpoint_step_dir(dir_, steps_done);
  std::error_code ec;
  std::filesystem::create_directories(sd, ec);
  if (ec) return io_error(sd + ": cannot create the checkpoint folder: " + ec.message());
  NamedTensors tensors;
  // Whole moments: gathered over the data-parallel group when the stage shards them
  // (every replica takes part), so the files do not depend on ZeRO or dp.
  NamedTensors state = ex.whole_optimizer_state();
  if (l.dp_rank == 0) {
    // Full tensors (tp shards gathered): the files do not depend on the tp degree.
    tensors = ex.optimizer().params();
    for (auto& s : state) tensors.push_back(s);
    if (l.tp() > 1) tensors = ex.full_tensors(tensors);
    if (l.tp_rank != 0) tensors.clear();
  }
  // The copies the writer reads while the next steps update the parameters: on CUDA in
  // pinned host memory, copied on a side stream (no second copy of the state on the GPU).
  std::vector<torch::Tensor> values;
  for (const auto& [name, t] : tensors) values.push_back(t);
  ComputeStream::HostCopies copies = ex.stream().copy_to_host(values);
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].second = copies.tensors[i];
  const std::string file = sd + "/stage_" + std::to_string(l.stage) + ".bin";
  const long long counter = ex.optimizer().steps_taken();
  timings_.push_back({steps_done, 0, 0});
  const size_t slot = timings_.size() - 1;
  const CheckpointId id{steps_done, l.stage, run_};
  auto job = [this, file, counter, slot, id, tensors = std::move(tensors), wait = copies.wait]() {
    if (tensors.empty()) return Status();
    wait();
    if (before_write_) before_write_();
    const auto w0 = std::chrono::steady_clock::now();
    Status s = write_tensor_file(file, tensors, counter, id);
    timings_[slot].write_s = seconds_since(w0);  // read only after the future is waited
    return s;
  };
  pending_step_ = steps_done;
  Json manifest = {{"version", 4},
                   {"step", steps_done},
                   {"run", run_},
                   {"world_size", l.world_size},
                   {"layout", checkpoint_layout(plan, ex.seed())}};
  // The same on every rank (an overflow skips everywhere), so the manifest holds it.
  if (const LossScaler& ls = ex.loss_scaler(); ls.enabled())
    manifest["loss_scaler"] = {{"scale", ls.scale}, {"good_steps", ls.good_steps}};
  pending_manifest_ = manifest.dump(2) + "\n";
  write_checked_ = false;
  write_status_ = Status();
  if (async_) {
    write_ = std::async(std::launch::async, std::move(job));
    timings_[slot].blocked_s = seconds_since(t0);
    return Status();
  }
  std::promise<Status> done;
  done.set_value(job());
  write_ = done.get_future();
  timings_[slot].blocked_s = seconds_since(t0);
  return finish(comm);
}

void CheckpointWriter::take_write_status(bool wait) {
  if (write_checked_ || (!wait && write_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)) return;
  write_checked_ = true;
  write_status_ = write_.get();
}

double CheckpointWriter::vote() {
  if (!in_flight()) return 1.0;
  take_write_status(/*wait=*/false);
  return write_checked_ && write_status_.ok() ? 1.0 : 0.0;
}

Status CheckpointWriter::tally(double votes, const RankLayout& layout) {
  if (!in_flight()) return Status();
  HARP_RETURN_IF_ERROR(write_status_);
  if (votes + 0.5 < layout.world_size) return Status();
  return complete(layout);
}

Status CheckpointWriter::finish(Transport& comm) {
  if (!in_flight()) return Status();
  take_write_status(/*wait=*/true);
  HARP_RETURN_IF_ERROR(write_status_);
  comm.barrier("checkpoint of step " + std::to_string(pending_step_));
  return complete(comm.layout());
}

Status CheckpointWriter::complete(const RankLayout& layout) {
  const int step = pending_step_;
  pending_step_ = -1;
  completed_.push_back(timings_.back());
  if (layout.rank != 0) return Status();
  HARP_RETURN_IF_ERROR(mark_checkpoint_complete(dir_, step, pending_manifest_));
  return keep_ > 0 ? prune_checkpoints(dir_, keep_) : Status();
}

}  // namespace harp::runtime
