// One way to write a folder of outputs (an export) so that it is never half one thing and
// half another: the command writes into a staging folder beside the target, and only a
// complete folder takes the target's name, by one atomic exchange. Until then the old
// folder stays as it was; after a failure, a full disk or a kill part-way, the target is
// the old folder whole (a killed run's staging folder is removed by the next write to the
// same target). What the command writes replaces the old folder's entries of the same
// kind (`owned`: an earlier export's manifest, weights, shards); every other entry of the
// old folder (a tokenizer the user put beside the weights, say) is carried into the new
// one by hard links, as Hugging Face's save_pretrained leaves such files in place.
#pragma once

#include <functional>
#include <string>

#include "harp/common/status.h"

namespace harp {

class OutputFolder {
 public:
  // Whether a top-level entry name of the old folder is one this command's output replaces.
  using Owned = std::function<bool(const std::string& name)>;

  // Prepares the staging folder for `dir` (created with its parents when missing). Fails
  // when `dir` is a file, or its parent cannot be written.
  static StatusOr<OutputFolder> begin(const std::string& dir, Owned owned);

  OutputFolder(OutputFolder&& other) noexcept;
  OutputFolder& operator=(OutputFolder&&) = delete;
  OutputFolder(const OutputFolder&) = delete;
  ~OutputFolder();  // not committed: the staging folder and what it holds are removed

  // Where the command writes its files.
  const std::string& path() const { return staging_; }
  // Carries the old folder's other entries over, then puts the staging folder in the
  // target's place in one step and removes the old one.
  Status commit();

 private:
  OutputFolder(std::string target, std::string staging, Owned owned)
      : target_(std::move(target)), staging_(std::move(staging)), owned_(std::move(owned)) {}
  std::string target_, staging_;
  Owned owned_;
  bool done_ = false;
};

}  // namespace harp
