// `harp profile`: the flags shared by the torch-free part (merge, import; cmd_profile.cc,
// in `harp`) and the measuring part (measure, check, links; cmd_profile_measure.cc, in
// `harp-train`, which installs the hooks). `harp` hands every other `harp profile` call
// over to `harp-train` (main.cc).
#pragma once

#include <string>
#include <vector>

#include "commands.h"

namespace harp::cli {

struct ProfileOpts {
  // measure (`harp profile --job JOB -o OUT.json`)
  std::string job_file, output;
  std::vector<std::string> devices;   // device types to record; default: see cmd_profile_measure.cc
  std::vector<int> microbatch_sizes;  // default: every microbatch_size / dp of the job
  bool per_layer = false;             // measure every layer (no redundancy removal)
  bool quick = false;                 // fewer repetitions (tests, smoke runs)
  int threads = 0;                    // 0: the job's training.threads
  int rounds = 0;                     // 0: the default (3; --quick 1)
  // check (`harp profile check --plan PLAN`); links (`harp profile links [--cluster C]`)
  std::string plan_file;
  std::string cluster_file;
};

using ProfileHook = int (*)(const ProfileOpts& opts, Context& ctx);
// harp-train installs the measuring commands; without them `harp profile` and `harp
// profile check` say that this build has no profiler.
void set_profile_hooks(ProfileHook measure, ProfileHook check, ProfileHook links);

}  // namespace harp::cli
