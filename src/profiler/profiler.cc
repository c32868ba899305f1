// The measurement side of the Zero-Redundant Profiler (see profiler.h).
#include "harp/profiler/profiler.h"
#include "harp/runtime/nn/precision.h"

#include <torch/cuda.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <utility>

#include "harp/common/check.h"
#include "harp/profile/unique_layers.h"
#include "harp/runtime/exec/emulation.h"
#include "harp/runtime/nn/gpt.h"
#include "harp/runtime/nn/weight_grad.h"
#include "harp/runtime/exec/memory.h"
#include "harp/runtime/exec/device.h"


namespace harp::profiler {
namespace {

using Clock = std::chrono::steady_clock;


double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Inputs of a range starting at `first`: token ids for the head, else the cut tensor of
// the layer before (a leaf that requires grad, as the runtime's received tensors are).
torch::Tensor range_input(const model::ModelSpec& model, int first, int samples, torch::Dtype dtype) {
  const auto& g = model.gpt;
  if (first == 0) return torch::randint(0, g.vocab, {samples, g.seq_len}, torch::kInt64);
  std::vector<std::int64_t> shape = {samples};
  const auto& cut = model.layers[first - 1].output_shape;
  shape.insert(shape.end(), cut.begin(), cut.end());
  return torch::randn(shape, torch::TensorOptions().dtype(dtype)).requires_grad_(true);
}

// Pushes this core's private caches' contents out (writes a buffer several times the
// L2 size), so a layer measured in a loop starts as it does inside a stage: its weights
// and activations are no longer in the core's caches after the other layers ran.
void evict_private_caches() {
  static std::vector<char> buffer = [] {
    size_t l2 = 1 << 20;
    if (FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r")) {
      unsigned kib = 0;
      if (std::fscanf(f, "%uK", &kib) == 1 && kib > 0) l2 = static_cast<size_t>(kib) << 10;
      std::fclose(f);
    }
    return std::vector<char>(4 * l2, 1);
  }();
  volatile char sink = 0;
  for (size_t i = 0; i < buffer.size(); i += 64) {
    buffer[i] = static_cast<char>(buffer[i] + 1);
    sink = static_cast<char>(sink + buffer[i]);
  }
  (void)sink;
}

double tensor_bytes(const torch::Tensor& t) {
  return t.defined() ? static_cast<double>(t.numel()) * static_cast<double>(t.element_size()) : 0.0;
}

}  // namespace

Timing summarize(std::vector<double> samples) {
  HARP_CHECK(!samples.empty());
  std::sort(samples.begin(), samples.end());
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(samples.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
  };
  Timing t;
  t.median_s = quantile(0.5);
  t.spread = t.median_s > 0 ? (quantile(0.75) - quantile(0.25)) / 2 / t.median_s : 0;
  t.repeats = static_cast<int>(samples.size());
  return t;
}

Measurement measure_range(const model::ModelSpec& model, int first, int last, int samples,
                          torch::Dtype dtype, const MeasureOptions& options) {
  HARP_CHECK(0 <= first && first < last && last <= model.num_layers()) << first << ".." << last;
  HARP_CHECK(samples >= 1);
  runtime::install_counting_allocator();
  const torch::Device device = options.compute;
  std::vector<runtime::GptLayer> layers =
      runtime::build_gpt_layers(model, first, last, 1234, runtime::param_dtype(dtype), device);
  const bool tail = layers.back()->layer().kind == model::LayerKind::kTail;
  const auto& g = model.gpt;
  torch::Tensor input = range_input(model, first, samples, dtype);
  if (!device.is_cpu()) input = input.to(device).detach().requires_grad_(input.requires_grad());
  torch::Tensor targets = tail ? torch::randint(0, g.vocab, {samples, g.seq_len}, torch::kInt64) : torch::Tensor();
  if (tail && !device.is_cpu()) targets = targets.to(device);
  auto done = [&] {  // the device's queued work finished (CUDA runs behind the host)
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  const double tokens = static_cast<double>(samples) * static_cast<double>(g.seq_len);
  torch::Tensor dy;

  Measurement m;
  for (const auto& [name, p] : runtime::named_parameters(layers)) m.param_bytes += tensor_bytes(p);
  std::vector<double> fwd, bwd, wgt;
  runtime::WeightGradQueue queue;  // the layers' weight products, timed apart
  // A CPU compute's own time (one thread: its CPU time, so that other processes on the
  // machine do not lengthen it); a GPU's, the wall time to the device's end.
  auto seconds_of = [&](const runtime::ComputeStart& c) {
    return device.is_cpu() ? runtime::cpu_compute_seconds(c, options.emulated_slowdown) : seconds_since(c.wall);
  };
  const auto start = Clock::now();
  for (int run = 0;; ++run) {
    const bool timed = run >= options.warmup;
    const bool count_bytes = run == options.warmup;
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
    const double base = runtime::live_tensor_bytes();
    if (options.evict_caches) evict_private_caches();
    runtime::reset_peak_tensor_bytes();
    // As the executor times an emulated device (runtime/emulation.h).
    runtime::ComputeStart c0 = runtime::start_compute();
    torch::Tensor y = input;
    {
      runtime::AutocastGuard autocast(dtype, device);  // as the executor's forward
      runtime::DeferWeightGrads defer(&queue);         // as a split backward's
      for (auto& layer : layers)
        y = layer->layer().kind == model::LayerKind::kTail ? layer->forward(y, targets) : layer->forward(y);
    }
    if (tail) (void)y.item<double>();  // the runtime reads the loss sum here
    done();
    runtime::finish_emulated_compute(c0, options.emulated_slowdown);
    const double f = seconds_of(c0);
    if (count_bytes) {
      m.activation_bytes = runtime::live_tensor_bytes() - base;
      m.output_bytes = tail ? 0.0 : tensor_bytes(y);
    }
    if (!tail && !dy.defined()) dy = torch::randn_like(y);  // y's dtype: what the executor's wire casts to
    if (options.evict_caches) evict_private_caches();
    c0 = runtime::start_compute();
    if (tail)
      (y / tokens).backward();
    else
      torch::autograd::backward({y}, {dy});
    done();
    runtime::finish_emulated_compute(c0, options.emulated_slowdown);
    const double i = seconds_of(c0);
    c0 = runtime::start_compute();
    queue.run();
    done();
    runtime::finish_emulated_compute(c0, options.emulated_slowdown);
    const double w = seconds_of(c0), b = i + w;
    if (count_bytes) m.peak_bytes = runtime::peak_tensor_bytes() - base;
    y = torch::Tensor();
    if (!timed) continue;
    fwd.push_back(f);
    bwd.push_back(b);
    wgt.push_back(w);
    const int n = static_cast<int>(fwd.size());
    if (n >= options.max_repeats || (n >= 3 && seconds_since(start) > options.max_seconds)) break;
    if (n >= options.min_repeats) {
      m.fwd = summarize(fwd);
      m.bwd = summarize(bwd);
      if (m.fwd.spread <= options.target_spread && m.bwd.spread <= options.target_spread) break;
    }
  }
  m.fwd = summarize(fwd);
  m.bwd = summarize(bwd);
  m.wgt = summarize(wgt);
  return m;
}

namespace {

// The median seconds of the optimizer step over the parameters of one layer per
// signature, `copies` times over (each copy its own tensors); `spec_bytes` gets their fp16
// bytes of the model spec.
double time_optimizer_step(const model::ModelSpec& model, torch::Dtype dtype, const MeasureOptions& options, int copies,
                           double* spec_bytes) {
  std::vector<std::pair<std::string, torch::Tensor>> params;  // the tensors outlive their layers
  *spec_bytes = 0;
  for (int copy = 0; copy < copies; ++copy)
    for (const auto& group : profile::unique_layers(model)) {
      const int i = group.representative;
      auto layers =
          runtime::build_gpt_layers(model, i, i + 1, 1234 + copy, runtime::param_dtype(dtype), options.compute);
      for (auto& [name, p] : runtime::named_parameters(layers)) {
        p.mutable_grad() = torch::randn_like(p) * 1e-3;
        params.emplace_back(name + "#" + std::to_string(copy), p);
      }
      *spec_bytes += model.layers[i].param_bytes;
    }
  runtime::AdamW opt(params, runtime::OptimConfig{});
  const std::vector<bool> count(params.size(), true);
  std::vector<double> times;
  const auto start = Clock::now();
  for (int run = 0; run < options.warmup + options.max_repeats; ++run) {
    const runtime::ComputeStart t0 = runtime::start_compute();
    const double norm = std::sqrt(opt.grad_squared_norm(count).item<double>());
    opt.step(run, opt.clip_scale(norm));
    if (options.compute.is_cuda()) torch::cuda::synchronize(options.compute.index());
    const double t = options.compute.is_cuda() ? seconds_since(t0.wall) : runtime::cpu_compute_seconds(t0, 1.0);
    if (run < options.warmup) continue;
    times.push_back(t);
    const int n = static_cast<int>(times.size());
    if (n >= options.min_repeats && (summarize(times).spread <= options.target_spread ||
                                     seconds_since(start) > options.max_seconds))
      break;
  }
  return summarize(times).median_s;
}

}  // namespace

OptimizerTiming measure_optimizer(const model::ModelSpec& model, torch::Dtype dtype, const MeasureOptions& options) {
  double one_bytes = 0, two_bytes = 0;
  const double one = time_optimizer_step(model, dtype, options, 1, &one_bytes);
  const double two = time_optimizer_step(model, dtype, options, 2, &two_bytes);
  OptimizerTiming t;
  if (one_bytes <= 0) return t;
  // The slope from the second copy. Noise can put it above the mean (a negative fixed
  // term) or at or below 0: then the mean alone, as without the second copy.
  t.per_param_byte_s = one / one_bytes;
  const double slope = (two - one) / (two_bytes - one_bytes);
  if (slope > 0 && slope < t.per_param_byte_s) {
    t.per_param_byte_s = slope;
    t.fixed_s = one - slope * one_bytes;
  }
  return t;
}

std::pair<int, int> stage_probe(const model::ModelSpec& model) {
  const int L = model.num_layers();
  int first = 0;
  while (first < L && model.layers[first].block < 0) ++first;
  if (first == L) return L >= 2 ? std::make_pair(0, 2) : std::make_pair(0, 0);
  const int b0 = model.layers[first].block;
  int last = first;
  while (last < L && model.layers[last].block >= b0 && model.layers[last].block <= b0 + 1) ++last;
  if (last - first < 2) return {0, 0};
  return {first, last};
}

namespace {

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string dtype_name(torch::Dtype d) {
  return d == torch::kFloat64 ? "float64" : d == torch::kBFloat16 ? "bfloat16" : d == torch::kHalf ? "float16" : "float32";
}

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100);
  return buf;
}

}  // namespace

ProfileReport profile_model(const model::ModelSpec& model, const ProfileRequest& request,
                            const ProgressFn& progress) {
  HARP_CHECK(request.emulated_slowdown >= 1.0);
  runtime::install_counting_allocator();
  runtime::set_compute_threads(request.threads, request.dtype);
  const auto start = Clock::now();
  ProfileReport report;
  report.layers = model.num_layers();
  const std::vector<profile::LayerGroup> groups = profile::unique_layers(model);
  report.unique = static_cast<int>(groups.size());
  // The layers to measure: one per signature, or all of them.
  std::vector<int> todo;
  for (const auto& g : groups) {
    if (request.deduplicate)
      todo.push_back(g.representative);
    else
      todo.insert(todo.end(), g.layers.begin(), g.layers.end());
  }
  std::sort(todo.begin(), todo.end());
  const double f = request.emulated_slowdown;
  MeasureOptions options = request.options;
  options.emulated_slowdown = f;
  // Each measurement `rounds` times, a whole pass apart; the round with the median
  // forward + backward is kept (see MeasureOptions::rounds).
  const auto [pa, pb] = stage_probe(model);
  const int rounds = std::max(1, options.rounds);
  std::map<std::pair<int, int>, std::vector<Measurement>> taken;  // (mbs, layer; -1: the probe)
  for (int round = 0; round < rounds; ++round) {
    const std::string of_rounds =
        rounds > 1 ? ", round " + std::to_string(round + 1) + "/" + std::to_string(rounds) : std::string();
    for (int mbs : request.microbatch_sizes) {
      for (size_t n = 0; n < todo.size(); ++n) {
        const int i = todo[n];
        const Measurement& m =
            taken[{mbs, i}].emplace_back(measure_range(model, i, i + 1, mbs, request.dtype, options));
        if (progress)
          progress(request.device + " mbs " + std::to_string(mbs) + ": " + model.layers[i].name + " (" +
                   std::to_string(n + 1) + "/" + std::to_string(todo.size()) + of_rounds + ")  fwd " +
                   ms(m.fwd.median_s) + " ±" + percent(m.fwd.spread) + "  bwd " + ms(m.bwd.median_s) + "  x" +
                   std::to_string(m.fwd.repeats));
      }
      if (pb - pa >= 2) taken[{mbs, -1}].push_back(measure_range(model, pa, pb, mbs, request.dtype, options));
    }
  }
  auto kept = [&](int mbs, int layer) -> const Measurement& {
    std::vector<Measurement>& all = taken[{mbs, layer}];
    std::sort(all.begin(), all.end(), [](const Measurement& x, const Measurement& y) {
      return x.fwd.median_s + x.bwd.median_s < y.fwd.median_s + y.bwd.median_s;
    });
    return all[(all.size() - 1) / 2];
  };
  for (int mbs : request.microbatch_sizes) {
    for (const int i : todo) {
      const Measurement& m = kept(mbs, i);
      ++report.measured;
      profile::ProfileEntry e;
      e.key = {request.device, model.layers[i].signature, mbs, 1};
      e.layer = model.layers[i].name;
      e.fwd_s = m.fwd.median_s;
      e.bwd_s = m.bwd.median_s;
      e.bwd_weight_s = std::min(m.wgt.median_s, m.bwd.median_s);
      e.fwd_spread = m.fwd.spread;
      e.bwd_spread = m.bwd.spread;
      e.repeats = m.fwd.repeats;
      e.param_bytes = m.param_bytes;
      e.output_bytes = m.output_bytes;
      e.activation_bytes = m.activation_bytes;
      e.peak_bytes = m.peak_bytes;
      if (!options.compute.is_cpu()) {  // not counted off the CPU: the spec's, in the measured dtype
        const double element = static_cast<double>(torch::elementSize(request.dtype)) / 2;  // spec bytes are fp16
        e.activation_bytes = e.peak_bytes = model.layers[i].activation_bytes * mbs * element;
      }
      e.workspace_bytes = std::max(0.0, m.peak_bytes - m.activation_bytes);
      e.source = "measured";
      report.db.put(e);
    }
  }
  profile::DeviceProfile d;
  // What a stage costs per call beyond its layers, per microbatch size (profiler.h).
  for (int mbs : request.microbatch_sizes) {
    if (pb - pa < 2) break;
    const Measurement& m = kept(mbs, -1);
    double sf = 0, sb = 0, sw = 0;  // the range's layers, one at a time
    for (int i = pa; i < pb; ++i) {
      const auto e = report.db.find({request.device, model.layers[i].signature, mbs, 1});
      HARP_CHECK(e.has_value()) << model.layers[i].name;
      sf += e->fwd_s;
      sb += e->bwd_s;
      sw += std::max(0.0, e->bwd_weight_s);
    }
    const double extra = pb - pa - 1;
    profile::StageFixed fixed;
    fixed.microbatch_size = mbs;
    fixed.fwd_s = (sf - m.fwd.median_s) / extra;
    fixed.bwd_s = (sb - m.bwd.median_s) / extra;
    fixed.bwd_weight_s = std::min(fixed.bwd_s, (sw - std::min(m.wgt.median_s, m.bwd.median_s)) / extra);
    fixed.probe_layers = pb - pa;
    d.stage_fixed.push_back(fixed);
    if (progress)
      progress(request.device + " mbs " + std::to_string(mbs) + ": stage probe [" + std::to_string(pa) + ", " +
               std::to_string(pb) + ") fwd " + ms(m.fwd.median_s) + " (layers " + ms(sf) + ")  bwd " +
               ms(m.bwd.median_s) + " (layers " + ms(sb) + "): fixed per call fwd " + ms(fixed.fwd_s) + ", bwd " +
               ms(fixed.bwd_s));
  }
  d.device = request.device;
  d.machine = hostname();
  d.libtorch = TORCH_VERSION;
  d.dtype = dtype_name(request.dtype);
  d.date = utc_now();
  d.model = model.gpt.name + " (h" + std::to_string(model.gpt.hidden) + ", s" + std::to_string(model.gpt.seq_len) +
            ", k" + std::to_string(model.gpt.granularity) + ")";
  d.threads = request.threads;
  d.emulated_slowdown = f;
  const OptimizerTiming opt = measure_optimizer(model, request.dtype, request.options);
  d.optimizer_s_per_param_byte = opt.per_param_byte_s;
  d.optimizer_fixed_s = opt.fixed_s;
  d.source = "measured";
  report.db.put_device(d);
  report.wall_s = seconds_since(start);
  return report;
}

std::vector<StageCheck> check_plan_stages(const model::ModelSpec& model, const plan::Plan& plan,
                                          torch::Dtype dtype, const MeasureOptions& options,
                                          const ProgressFn& progress) {
  std::vector<StageCheck> out;
  for (int i = 0; i < plan.num_stages(); ++i) {
    const plan::Stage& st = plan.stages[i];
    StageCheck c;
    c.stage = i;
    c.samples = st.largest_share(plan.microbatch_size);  // the replica the stage's times are
    c.predicted_fwd_s = st.fwd_s;
    c.predicted_bwd_s = st.bwd_s;
    c.slowdown = std::max(1.0, st.emulated_slowdown);
    MeasureOptions o = options;
    o.emulated_slowdown = c.slowdown;
    c.measured = measure_range(model, st.first_layer, st.last_layer, c.samples, dtype, o);
    if (progress)
      progress("stage " + std::to_string(i) + " [" + std::to_string(st.first_layer) + ", " +
               std::to_string(st.last_layer) + "): fwd " + ms(c.measured.fwd.median_s) + "  bwd " +
               ms(c.measured.bwd.median_s) + "  x" + std::to_string(c.measured.fwd.repeats));
    out.push_back(c);
  }
  return out;
}

}  // namespace harp::profiler
