// The analytic and profile-DB layer sources (the table source is in cost_table.cc).
#include "harp/cost/layer_costs.h"

#include "harp/common/format.h"
#include "harp/cost/compute_cost.h"
#include "harp/cost/efficiency.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdio>
#include <set>

namespace harp::cost {

const char* cost_source_name(CostSource source) {
  switch (source) {
    case CostSource::kAnalytic: return "analytic";
    case CostSource::kProfile: return "profile";
    case CostSource::kTable: return "table";
  }
  return "?";
}

std::vector<LayerBytes> layer_bytes_of(const model::ModelSpec& model, double activation_scale) {
  std::vector<LayerBytes> out;
  out.reserve(model.layers.size());
  for (const auto& l : model.layers) {
    const double a = activation_scale;
    LayerBytes b{l.param_bytes, a * l.activation_bytes, a * l.output_bytes, l.output_shape};
    b.block = l.kind == model::LayerKind::kBlockPart ? l.block : -1;
    b.input_bytes = a * l.input_bytes;
    b.attention_score_bytes = a * l.attention_score_bytes;
    b.attention_flop_fraction = l.fwd_flops > 0 ? l.attention_flops / l.fwd_flops : 0.0;
    b.weight_grad_bytes = a * l.weight_grad_bytes;
    b.replicated_activation_bytes = a * l.replicated_activation_bytes;
    b.backward_working_bytes = a * l.backward_working_bytes;
    b.largest_weight_bytes = l.largest_weight_bytes;
    if (l.kind != model::LayerKind::kHead && l.param_count > 0 && l.fwd_flops > 0)
      b.weight_grad_fraction = std::max(0.0, (l.fwd_flops - l.attention_flops) / (2.0 * l.fwd_flops));
    out.push_back(std::move(b));
  }
  return out;
}

AnalyticCosts::AnalyticCosts(const model::ModelSpec& model, CostConfig config)
    : model_(model), config_(config), bytes_(layer_bytes_of(model, config.activation_bytes_scale)) {}

std::string AnalyticCosts::describe() const {
  char buf[160];
  if (config_.efficiency_given)
    std::snprintf(buf, sizeof buf, "%.0f%% of each device's fp16/bf16 peak (the job's cost section)",
                  100 * config_.compute_efficiency);
  else
    std::snprintf(buf, sizeof buf, "%s at each architecture's published or fitted efficiency (cost/efficiency.h)",
                  config_.compute_dtype.c_str());
  return std::string("analytic roofline: ") + buf +
         fmt(", %.0f%% of memory bandwidth", 100 * config_.memory_efficiency);
}

std::string AnalyticCosts::describe_for(const cluster::Cluster& cluster) const {
  std::string out = "analytic roofline:";
  std::set<std::string> seen;
  for (const auto& s : cluster.subclusters) {
    if (!seen.insert(s.device).second) continue;
    out +=
        (seen.size() > 1 ? "; " : " ") + s.device + " " + compute_rate(cluster.devices.at(s.device), config_).basis();
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "; %.0f%% of memory bandwidth", 100 * config_.memory_efficiency);
  return out + buf;
}

std::optional<LayerTime> AnalyticCosts::time(const cluster::Cluster& cluster, int sub, int layer,
                                             int samples, int tp) const {
  return analytic_layer_time(model_.layers.at(layer), cluster.device_of(sub), samples, tp,
                             cluster.subclusters.at(sub).intra_node, config_);
}

ProfiledCosts::ProfiledCosts(const model::ModelSpec& model, const profile::ProfileDb& db,
                             CostConfig config, std::string file)
    : model_(model), db_(db), analytic_(model, config), file_(std::move(file)) {}

std::optional<LayerTime> ProfiledCosts::time(const cluster::Cluster& cluster, int sub, int layer,
                                             int samples, int tp) const {
  const std::string& device = real_device(cluster.subclusters.at(sub).device);
  if (auto e = db_.find({device, model_.layers.at(layer).signature, samples, tp})) {
    LayerTime t;
    t.fwd_s = e->fwd_s;
    t.bwd_s = e->bwd_s;
    t.bwd_weight_s = e->bwd_weight_s;
    t.source = CostSource::kProfile;
    return t;
  }
  std::optional<LayerTime> t = analytic_.time(cluster, sub, layer, samples, tp);
  // The roofline anchored to this device's own measurement of the layer (the smallest tp
  // measured, 1 where there is one; the nearest samples count): scaled by measured /
  // roofline there, so a shape the profile lacks (a tp it did not measure) is not judged
  // by the bare roofline against measured neighbours, which would favour whatever was not
  // measured. Sailor's LLaMA-3-8B profiles, for one, have tp 2 and 4 only.
  std::optional<profile::ProfileEntry> anchor;
  for (int anchor_tp = 1; anchor_tp <= 64 && !anchor; anchor_tp *= 2)
    anchor = db_.nearest(device, model_.layers[layer].signature, samples, anchor_tp);
  if (t && anchor) {
    auto base = analytic_.time(cluster, sub, layer, anchor->key.microbatch_size, anchor->key.tp);
    if (base && base->fwd_s > 0 && base->bwd_s > 0) {
      t->fwd_s *= anchor->fwd_s / base->fwd_s;
      t->bwd_s *= anchor->bwd_s / base->bwd_s;
    }
  }
  return t;
}

std::string ProfiledCosts::describe() const {
  return "profile DB " + file_ + " (" + std::to_string(db_.size()) +
         " entries; the analytic roofline for keys it lacks)";
}

namespace {

std::string shown_factor(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", f);
  return buf;
}

// The device types of `cluster`, each once, in subcluster order.
std::vector<std::string> device_types(const cluster::Cluster& cluster) {
  std::vector<std::string> out;
  for (const auto& s : cluster.subclusters)
    if (std::find(out.begin(), out.end(), s.device) == out.end()) out.push_back(s.device);
  return out;
}

// Signatures of `model` the DB has any entry for on `device`, and how many there are.
std::pair<int, int> covered_signatures(const profile::ProfileDb& db, const model::ModelSpec& model,
                                       const std::string& device) {
  std::set<std::string> all, found;
  for (const auto& l : model.layers) all.insert(l.signature);
  for (const auto& e : db.entries())
    if (e.key.device == device && all.count(e.key.signature)) found.insert(e.key.signature);
  return {static_cast<int>(found.size()), static_cast<int>(all.size())};
}

}  // namespace

std::string ProfiledCosts::describe_for(const cluster::Cluster& cluster) const {
  std::string out = "profile DB " + file_ + ":";
  for (const std::string& dev : device_types(cluster)) {
    const std::string& real = real_device(dev);
    const auto [found, all] = covered_signatures(db_, model_, real);
    out += " " + dev + " ";
    if (found == 0) {
      out += "analytic (not in the profile);";
      continue;
    }
    const profile::DeviceProfile* d = db_.device(real);
    out += d != nullptr && d->source == "imported" ? "imported" : "measured";
    out += " (" + std::to_string(found) + " of " + std::to_string(all) + " unique layers";
    if (d != nullptr && d->emulated_slowdown > 1)
      out += ", emulated " + shown_factor(d->emulated_slowdown) + "x slower";
    if (d != nullptr && d->threads > 0) out += ", " + std::to_string(d->threads) + " thread(s)";
    out += ");";
  }
  out.pop_back();
  return out;
}

std::optional<Seconds> ProfiledCosts::optimizer_s_per_param_byte(const cluster::Cluster& cluster, int sub) const {
  const profile::DeviceProfile* d = db_.device(real_device(cluster.subclusters.at(sub).device));
  if (d == nullptr || d->optimizer_s_per_param_byte < 0) return std::nullopt;
  return d->optimizer_s_per_param_byte;
}

std::optional<StageFixedTime> ProfiledCosts::stage_fixed(const cluster::Cluster& cluster, int sub, int samples,
                                                         int tp) const {
  const profile::DeviceProfile* d = db_.device(real_device(cluster.subclusters.at(sub).device));
  const profile::StageFixed* f = d == nullptr || tp != 1 ? nullptr : d->fixed_for(samples);
  if (f == nullptr) return std::nullopt;
  return StageFixedTime{f->fwd_s, f->bwd_s, f->bwd_weight_s};
}

Seconds ProfiledCosts::optimizer_fixed_s(const cluster::Cluster& cluster, int sub) const {
  const profile::DeviceProfile* d = db_.device(real_device(cluster.subclusters.at(sub).device));
  return d == nullptr || d->optimizer_s_per_param_byte < 0 ? 0.0 : d->optimizer_fixed_s;
}

Status ProfiledCosts::check(const profile::ProfileDb& db, const model::ModelSpec& model,
                            const cluster::Cluster& cluster, const std::string& dtype, const std::string& file) {
  for (const std::string& dev : device_types(cluster)) {
    const int entries = db.entries_of(dev);
    if (entries == 0) continue;
    const profile::DeviceProfile* d = db.device(dev);
    const std::string fix = "; fix: profile this model (`harp profile --job JOB -o " + shown_path(file) +
                            "`) or plan without --profile";
    if (covered_signatures(db, model, dev).first == 0)
      return failed_precondition(
          shown_path(file) + ": device " + dev + " has " + std::to_string(entries) +
          " entries, none for a layer of this model (" + model.gpt.name + ", granularity " +
          std::to_string(model.gpt.granularity) + "): it was profiled for another model shape" +
          (d != nullptr && !d->model.empty() ? " (" + d->model + ")" : std::string()) + fix);
    if (d != nullptr && !d->dtype.empty() && !dtype.empty() && d->dtype != dtype)
      return failed_precondition(shown_path(file) + ": device " + dev + " was profiled in " + d->dtype +
                                 ", the job trains in " + dtype + " (training.dtype)" + fix);
  }
  return Status();
}

std::string Calibration::describe() const {
  std::string out;
  for (const auto& [dev, f] : factors) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s x%.3f / x%.3f", out.empty() ? "" : ", ", dev.c_str(), f.first, f.second);
    out += buf;
  }
  return out;
}

StatusOr<Calibration> calibrate(const LayerCostSource& source, const cluster::Cluster& cluster,
                                const std::vector<MeasuredStage>& stages, const std::string& file) {
  std::map<std::string, std::array<double, 4>> sums;  // device -> measured f, b, predicted f, b
  for (size_t i = 0; i < stages.size(); ++i) {
    const MeasuredStage& st = stages[i];
    // A measured time of zero is named by its field, forward or backward alike (plans read
    // -0.0 as 0).
    for (const auto& [key, v] : {std::make_pair("fwd_s", st.fwd_s), std::make_pair("bwd_s", st.bwd_s)})
      if (!(v > 0))
        return invalid_argument(shown_path(file) + ": stages[" + std::to_string(i) + "]." + key + " = " +
                                Json(v).dump() +
                                ": a measured stage time must be greater than 0; fix: use the measured_plan.json "
                                "of a run that trained steps");
    const std::string& dev = cluster.subclusters.at(st.subcluster).device;
    auto& s = sums[dev];
    double fwd = 0, bwd = 0, repeated = 0;  // predicted forward, backward, recomputed forward
    bool profiled = true;
    for (int l = st.first_layer; l < st.last_layer; ++l) {
      auto t = source.time(cluster, st.subcluster, l, st.samples, 1);
      if (!t)
        return invalid_argument(shown_path(file) + ": stage " + std::to_string(i) + " has no predicted time for layer " +
                                std::to_string(l) + " at " + std::to_string(st.samples) +
                                " samples on " + dev + "; calibrate with a run of this job's model");
      fwd += t->fwd_s;
      bwd += t->bwd_s;
      profiled = profiled && t->source == CostSource::kProfile;
      const LayerBytes& b = source.layers().at(l);
      if (st.recompute == Recompute::kFull && b.block >= 0) repeated += t->fwd_s;
      if (st.recompute == Recompute::kSelective) repeated += t->fwd_s * b.attention_flop_fraction;
    }
    // As StageCosts predicts the stage: its fixed cost per call once, not once per layer.
    const auto fixed = profiled ? source.stage_fixed(cluster, st.subcluster, st.samples, 1) : std::nullopt;
    if (fixed) {
      fwd -= (st.last_layer - st.first_layer - 1) * fixed->fwd_s;
      bwd -= (st.last_layer - st.first_layer - 1) * fixed->bwd_s;
    }
    s[0] += st.fwd_s;
    s[1] += st.bwd_s - (fwd > 0 ? st.fwd_s * repeated / fwd : 0.0);
    s[2] += fwd;
    s[3] += bwd;
  }
  Calibration c;
  c.file = file;
  for (const auto& [dev, s] : sums) {
    if (!(s[0] > 0 && s[1] > 0 && s[2] > 0 && s[3] > 0))
      return invalid_argument(shown_path(file) + ": device " + dev +
                              " has a zero measured or predicted stage time; use a measured_plan.json of a run "
                              "that trained steps");
    c.factors[dev] = {s[0] / s[2], s[1] / s[3]};
  }
  return c;
}

CalibratedCosts::CalibratedCosts(LayerCostSource& base, Calibration calibration)
    : base_(base), calibration_(std::move(calibration)) {}

std::optional<LayerTime> CalibratedCosts::time(const cluster::Cluster& cluster, int sub, int layer, int samples,
                                               int tp) const {
  auto t = base_.time(cluster, sub, layer, samples, tp);
  if (!t) return t;
  auto it = calibration_.factors.find(real_device(cluster.subclusters.at(sub).device));
  if (it != calibration_.factors.end()) {
    t->fwd_s *= it->second.first;
    t->bwd_s *= it->second.second;
  }
  return t;
}

std::optional<StageFixedTime> CalibratedCosts::stage_fixed(const cluster::Cluster& cluster, int sub, int samples,
                                                           int tp) const {
  auto f = base_.stage_fixed(cluster, sub, samples, tp);
  if (!f) return f;
  auto it = calibration_.factors.find(real_device(cluster.subclusters.at(sub).device));
  if (it != calibration_.factors.end()) {
    f->fwd_s *= it->second.first;
    f->bwd_s *= it->second.second;
    f->bwd_weight_s *= it->second.second;
  }
  return f;
}

std::string CalibratedCosts::describe() const {
  return base_.describe() + "; calibrated by " + calibration_.file + " (" + calibration_.describe() + ")";
}

std::string CalibratedCosts::describe_for(const cluster::Cluster& cluster) const {
  return base_.describe_for(cluster) + "; calibrated by " + calibration_.file + " (" + calibration_.describe() + ")";
}

void CalibratedCosts::alias_device(const std::string& view_device, const std::string& real) {
  LayerCostSource::alias_device(view_device, real);
  base_.alias_device(view_device, real);
}

}  // namespace harp::cost
