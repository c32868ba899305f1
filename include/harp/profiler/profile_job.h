// `harp profile --job JOB`: the job's model measured on this machine, one layer per
// signature, for every microbatch size the planner will ask for, and recorded for each
// device type this machine stands in for (the built-in `cpu`, and the emulated types:
// this CPU once per distinct slowdown, run as `harp train --emulate` runs it).
#pragma once

#include <string>
#include <vector>

#include "harp/job/job.h"
#include "harp/profile/profile_db.h"
#include "harp/profiler/profiler.h"

namespace harp::profiler {

struct JobProfileRequest {
  std::vector<std::string> devices;   // device types to record; empty: those this machine stands in for
  std::vector<int> microbatch_sizes;  // empty: every divisor of the job's microbatch_size
  bool per_layer = false;             // measure every layer (no redundancy removal)
  bool quick = false;                 // fewer repetitions (tests, smoke runs)
  int threads = 0;                    // 0: the job's training.threads
  int rounds = 0;                     // > 0: MeasureOptions::rounds (0: the default)
};

struct JobProfile {
  profile::ProfileDb db;                          // every recorded device type's entries
  std::vector<const cluster::DeviceType*> devices;  // recorded, in the cluster's order (the job's)
  std::vector<int> microbatch_sizes;
  int slowdowns = 0;                              // distinct slowdowns measured (this CPU once each)
  ProfileReport total;                            // measurements and wall time over all of them
  double optimizer_s_per_param_byte = 0;          // this machine's (slowdown 1 where measured)
};

// The repetitions of a measurement: the defaults, or a quick few.
MeasureOptions measure_options(bool quick);

// A model far too large for this machine is refused before anything is built: measuring
// holds (float32) the weights, gradients and two optimizer moments of one layer per
// signature plus the largest layer's activations at the largest microbatch size. The
// largest share of this machine's memory a measurement may take.
inline constexpr double kProfileMemoryShare = 0.8;

// Measures; `progress` gets a line per layer measured and per slowdown started. Errors
// name the job file, the field and the fix (an unknown --device, no device this machine
// stands in for, too little memory, a dtype the device cannot compute in).
StatusOr<JobProfile> profile_job(const job::Job& job, const JobProfileRequest& request,
                                 const ProgressFn& progress);

}  // namespace harp::profiler
