// Profiling a job's model (see profile_job.h).
#include "harp/profiler/profile_job.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "harp/common/format.h"
#include "harp/common/memory_limit.h"
#include "harp/profile/unique_layers.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/nn/trainable.h"

namespace harp::profiler {
namespace {

// Bytes per parameter while measuring a layer: float32 weight, gradient and AdamW's two
// moments.
constexpr double kBytesPerParam = 16.0;
// The spec's activation bytes are fp16: x2 for float32, x2 margin.
constexpr double kActivationFactor = 4.0;

// The device types to record: those named, else every type of the cluster this machine
// stands in for (the built-in `cpu` and the emulated ones, measured on this CPU).
StatusOr<std::vector<const cluster::DeviceType*>> devices_to_record(const job::Job& job,
                                                                    const std::vector<std::string>& names) {
  std::vector<const cluster::DeviceType*> out;
  for (const std::string& n : names) {
    auto it = job.cluster.devices.find(n);
    if (it == job.cluster.devices.end())
      return invalid_argument("--device " + n + ": not a device type of the cluster in " + job.file +
                              "; use one of its subclusters' devices");
    out.push_back(&it->second);
  }
  if (!names.empty()) return out;
  for (const auto& s : job.cluster.subclusters) {
    const cluster::DeviceType& d = job.cluster.devices.at(s.device);
    const bool stands_in = d.name == "cpu" || d.emulated_slowdown > 1.0;
    if (stands_in && std::find(out.begin(), out.end(), &d) == out.end()) out.push_back(&d);
  }
  if (out.empty())
    return invalid_argument(job.file + ": no device type of the cluster is this machine's (cpu, or one with "
                            "emulated_slowdown); name the one these measurements stand for with --device");
  return out;
}

Status check_memory(const job::Job& job, const std::vector<int>& sizes) {
  const model::ModelSpec& m = job.model;
  double bytes = 0, acts = 0;
  const int largest = *std::max_element(sizes.begin(), sizes.end());
  for (const auto& g : profile::unique_layers(m)) {
    const auto& l = m.layers[g.representative];
    const double tied = l.kind == model::LayerKind::kTail ? static_cast<double>(m.gpt.vocab) * m.gpt.hidden : 0;
    bytes += kBytesPerParam * (static_cast<double>(l.param_count) + tied);
    acts = std::max(acts, kActivationFactor * l.activation_bytes * largest);
  }
  // Physical memory, or less where a cgroup or `ulimit -v` limits this process: a run
  // under such a limit is refused here, not killed minutes into measuring.
  const MemoryLimit have = usable_memory();
  if (have.bytes > 0 && bytes + acts > kProfileMemoryShare * have.bytes)
    return infeasible(fmt("%s: measuring %s needs about %.1f GiB (one layer per signature with its optimizer "
                          "state, and activations at microbatch size %d), and this process may use %.1f GiB (%s); "
                          "profile on a larger machine or under a higher limit, or with smaller --microbatch-sizes",
                          job.file.c_str(), m.gpt.name.c_str(), (bytes + acts) / (1 << 30), largest,
                          have.bytes / (1 << 30), have.source.c_str()));
  return Status();
}

}  // namespace

MeasureOptions measure_options(bool quick) {
  MeasureOptions m;
  if (quick) {
    m.warmup = 1;
    m.min_repeats = 3;
    m.max_repeats = 5;
    m.max_seconds = 0.5;
    m.rounds = 1;
  }
  return m;
}

StatusOr<JobProfile> profile_job(const job::Job& job, const JobProfileRequest& request,
                                 const ProgressFn& progress) {
  HARP_RETURN_IF_ERROR(runtime::check_trainable(job.model));
  JobProfile out;
  HARP_ASSIGN_OR_RETURN(out.devices, devices_to_record(job, request.devices));
  out.microbatch_sizes = request.microbatch_sizes;
  if (out.microbatch_sizes.empty())
    for (int s = 1; s <= job.planner.microbatch_size; ++s)
      if (job.planner.microbatch_size % s == 0) out.microbatch_sizes.push_back(s);
  HARP_RETURN_IF_ERROR(check_memory(job, out.microbatch_sizes));
  ProfileRequest r;
  r.microbatch_sizes = out.microbatch_sizes;
  r.dtype = runtime::torch_dtype(job.training.dtype);
  r.threads = request.threads > 0 ? request.threads : job.training.threads;
  r.deduplicate = !request.per_layer;
  r.options = measure_options(request.quick);
  if (request.rounds > 0) r.options.rounds = request.rounds;
  // The job's training device (auto: the first GPU when libtorch sees CUDA).
  HARP_ASSIGN_OR_RETURN(r.options.compute, runtime::resolve_device(job.training.device, 0));
  if (Status s = runtime::check_dtype_on_device(job.training.dtype, r.options.compute); !s.ok())
    return Status(s.code(), job.file + ": training." + s.message());
  if (r.options.compute.is_cuda()) runtime::set_current_device(r.options.compute);
  const model::ModelSpec& m = job.model;
  std::string sizes;
  for (int s : out.microbatch_sizes) sizes += " " + std::to_string(s);
  progress("harp profile: " + m.gpt.name + " (" + std::to_string(m.num_layers()) + " layers, " +
           std::to_string(profile::unique_layers(m).size()) + " unique), microbatch sizes" + sizes + ", " +
           config::name_of(job.training.dtype) + ", " + std::to_string(r.threads) + " thread(s), on " +
           (r.options.compute.is_cuda() ? "GPU " + r.options.compute.str() : std::string("this CPU")));
  // This CPU once per distinct slowdown: as itself (factor 1) and as each emulated type,
  // which runs as `harp train --emulate` runs it (sleeping after each compute).
  std::map<double, ProfileReport> by_factor;
  for (const cluster::DeviceType* d : out.devices) {
    const double f = std::max(1.0, d->emulated_slowdown);
    if (!by_factor.count(f)) {
      r.device = d->name;
      r.emulated_slowdown = f;
      if (f > 1) progress("  (as " + d->name + ", emulated " + fmt("%g", f) + "x slower)");
      by_factor[f] = profile_model(m, r, [&progress](const std::string& line) { progress("  " + line); });
      out.total.measured += by_factor[f].measured;
      out.total.wall_s += by_factor[f].wall_s;
      out.total.unique = by_factor[f].unique;
      out.total.layers = by_factor[f].layers;
    }
    for (profile::ProfileEntry e : by_factor[f].db.entries()) {
      e.key.device = d->name;
      out.db.put(e);
    }
    profile::DeviceProfile dp = by_factor[f].db.devices().begin()->second;
    dp.device = d->name;
    out.db.put_device(dp);
  }
  out.slowdowns = static_cast<int>(by_factor.size());
  out.optimizer_s_per_param_byte = by_factor.begin()->second.db.devices().begin()->second.optimizer_s_per_param_byte;
  return out;
}

}  // namespace harp::profiler
