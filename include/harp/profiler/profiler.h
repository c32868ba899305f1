// The Zero-Redundant Profiler, measurement side (links libtorch): runs the runtime's own
// layers (runtime/gpt.h, the modules that train, same dtype and intra-op threads) on the
// local device and writes a profile DB (profile/profile_db.h). One representative per
// structural signature (profile/unique_layers.h) is measured per microbatch size; every
// other layer with that signature shares its entry.
//
// A measurement: warm-up runs, then timed repetitions of forward and backward until
// both medians are stable (half the interquartile range within `target_spread` of the
// median, after at least `min_repeats`) or a repetition or time limit is reached. Bytes
// are counted, not computed: a counting CPU allocator (installed for the process by
// profile_model and measure_range) tracks live and peak tensor bytes, so the activation
// bytes are what forward leaves alive for backward (its output included), and the peak
// is the high-water mark of forward + backward above the inputs. The device is the CPU,
// as for the runtime, which builds its layers there today.
//
// A stage costs more or less than the sum of its layers measured one at a time: each
// measurement is a call of its own (its input cold, its timers, the emulation's sleep
// after it). Per microbatch size the profiler also measures one range of consecutive
// layers (stage_probe) and records, per device type, the fixed cost per call F that makes
// sum(single) - (n - 1) F equal the range (profile::StageFixed); the cost model takes F
// off every layer and adds it once per stage.
//
// Emulated device types (a cluster file's emulated_slowdown f > 1) are measured as the
// runtime runs them: after each compute of t the measurement sleeps (f - 1) t, as the
// executor does, and records the whole span (about f t; more when a core that idled runs
// the next compute slower, which a multiplication would miss); the device record says
// so (DeviceProfile::emulated_slowdown).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"
#include "harp/profile/profile_db.h"
#include "harp/runtime/exec/optimizer.h"

namespace harp::profiler {

// Progress: one line per measurement ("cpu mbs 4: block0.attn (2/4) fwd 1.23 ms ...").
using ProgressFn = std::function<void(const std::string& line)>;

struct MeasureOptions {
  int warmup = 2;
  int min_repeats = 5;
  int max_repeats = 40;
  double target_spread = 0.02;  // stop rule: half-IQR / median of forward and backward
  double max_seconds = 3.0;     // per measurement, after the warm-up
  // profile_model takes every measurement this many times, a whole pass over the layers
  // apart, and keeps the one with the median forward + backward: on a machine whose speed
  // drifts for seconds at a time (a shared VM: bursts 30% slower measured here, see
  // docs/profiler.md) one spoiled round does not make the entry.
  int rounds = 3;
  // Evict the core's private caches before each timed forward and backward: inside a
  // stage, the other layers and microbatches run in between (see evict_private_caches).
  bool evict_caches = true;
  double emulated_slowdown = 1;  // > 1: sleep (factor - 1) t after each compute t, as the runtime
  // Where the layers run (CUDA: each timed span ends when the device is done). The
  // counting allocator sees the CPU's tensors only: on CUDA the activation and peak bytes
  // of a measurement are the model spec's, in the measured dtype (profile_model).
  torch::Device compute = torch::kCPU;
};

struct Timing {
  double median_s = 0;
  double spread = 0;  // half the interquartile range / median
  int repeats = 0;
};

// One layer range [first, last) for `samples` samples, as the runtime runs it.
struct Measurement {
  Timing fwd, bwd;
  // Of bwd, the weight-gradient products, timed apart: the backward runs with the linear
  // layers' products queued (runtime/nn/weight_grad.h), then the queue; bwd is both.
  Timing wgt;
  double param_bytes = 0;       // of the layers, in the measured dtype
  double output_bytes = 0;      // the tensor leaving the range (the loss: 0)
  double activation_bytes = 0;  // alive after forward: kept for backward, output included
  double peak_bytes = 0;        // high-water mark of forward + backward above the inputs
};

// Median and half-IQR / median of `samples` (seconds). REQUIRES: non-empty.
Timing summarize(std::vector<double> samples);

// Runs forward and backward of layers [first, last) of `model` with the runtime's
// modules. REQUIRES 0 <= first < last <= L, samples >= 1, dtype float32 or float64.
Measurement measure_range(const model::ModelSpec& model, int first, int last, int samples,
                          torch::Dtype dtype, const MeasureOptions& options);

// The runtime's optimizer step (global-norm, clip scale, AdamW update, zero_grad) as
// fixed_s + per_param_byte x a stage's fp16 parameter bytes of the model spec (the unit
// the cost model multiplies): timed over the parameters of one layer per signature and
// over twice as many tensors and bytes (a second copy), the difference giving the slope.
struct OptimizerTiming {
  double per_param_byte_s = 0;
  double fixed_s = 0;  // per step and stage, >= 0 (0 where the slope was not below the mean)
};
OptimizerTiming measure_optimizer(const model::ModelSpec& model, torch::Dtype dtype, const MeasureOptions& options);

// The layers of the stage probe: the first two blocks' layers (the first block's, when
// the model has one; empty when fewer than two layers). profile_model measures this range
// beside its layers' entries, per microbatch size, and records what a stage costs per
// call beyond its layers (profile::StageFixed).
std::pair<int, int> stage_probe(const model::ModelSpec& model);

struct ProfileRequest {
  std::string device = "cpu";        // the device type the entries are recorded under
  double emulated_slowdown = 1;      // >= 1; see above (request.options' own is ignored)
  std::vector<int> microbatch_sizes = {1};
  torch::Dtype dtype = torch::kFloat32;
  int threads = 1;                   // intra-op threads while measuring
  bool deduplicate = true;           // false: measure every layer (the per-layer profiler)
  MeasureOptions options;
};

struct ProfileReport {
  profile::ProfileDb db;
  int layers = 0;                    // L
  int unique = 0;                    // signatures
  int measured = 0;                  // layer measurements taken (per microbatch size)
  double wall_s = 0;
};

ProfileReport profile_model(const model::ModelSpec& model, const ProfileRequest& request,
                            const ProgressFn& progress);

// One stage of a plan run here, beside what the plan predicts for it.
struct StageCheck {
  int stage = 0;
  int samples = 1;               // the stage's largest share (microbatch_size / dp when even)
  double predicted_fwd_s = 0, predicted_bwd_s = 0;
  double slowdown = 1;           // the stage's emulated_slowdown, emulated while measuring
  Measurement measured;          // times include the emulated sleep
  double error() const {         // (predicted - measured) / measured of forward + backward
    const double m = measured.fwd.median_s + measured.bwd.median_s;
    return m > 0 ? (predicted_fwd_s + predicted_bwd_s - m) / m : 0;
  }
};

// Runs every stage's layer range with its per-replica samples (as `harp train --emulate`
// would: emulated stages sleep as the executor does). REQUIRES: the plan matches
// the model (runtime::check_plan_matches_model).
std::vector<StageCheck> check_plan_stages(const model::ModelSpec& model, const plan::Plan& plan,
                                          torch::Dtype dtype, const MeasureOptions& options,
                                          const ProgressFn& progress);

// Point-to-point and all-reduce between two ranks of this machine (Gloo over
// 127.0.0.1, the transport `harp train` uses): one-way time of each size, fitted to
// latency + bytes / bandwidth by least squares.
struct LinkFit {
  double latency_s = 0;
  double bytes_per_s = 0;
  std::vector<std::pair<double, double>> points;  // (bytes, median seconds)
};
struct LinkReport {
  LinkFit p2p;        // one way: send of `bytes`, measured as a round trip minus the small reply
  LinkFit allreduce;  // two ranks, sum of `bytes`
};
// REQUIRES: sizes non-empty, each >= 4 bytes.
LinkReport measure_links(const std::vector<double>& sizes_bytes, const MeasureOptions& options);

}  // namespace harp::profiler
