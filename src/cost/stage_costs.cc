// Prefix sums over the layer sequence so a search asks for any range in O(1).
#include "harp/cost/stage_costs.h"

#include <algorithm>

namespace harp::cost {
namespace {

// The prefixes' key: the device type, and a drifted subcluster's factor (its times are
// its own, no longer its device type's).
std::string cost_key(const cluster::Subcluster& sub, const CostConfig& config) {
  const double drift = config.drift_of(sub.name);
  return drift == 1.0 ? sub.device : sub.device + "@" + std::to_string(drift);
}

std::vector<Seconds> prefix_of(const std::vector<Seconds>& v) {
  std::vector<Seconds> p(v.size() + 1, 0.0);
  for (size_t i = 0; i < v.size(); ++i) p[i + 1] = p[i] + v[i];
  return p;
}

// A stage's fixed cost per call taken off every layer (it is added once per stage): at
// most the smallest layer time, so no layer's time falls below 0 and prefixes stay
// monotone. Returns the term applied.
StageFixedTime take_fixed_off(StageFixedTime fixed, double drift, std::vector<Seconds>& f, std::vector<Seconds>& b,
                              std::vector<Seconds>& w, std::vector<Seconds>& rs, std::vector<Seconds>& rf,
                              const std::vector<LayerBytes>& layers) {
  fixed.fwd_s = std::min(fixed.fwd_s * drift, *std::min_element(f.begin(), f.end()));
  fixed.bwd_s = std::min(fixed.bwd_s * drift, *std::min_element(b.begin(), b.end()));
  fixed.bwd_weight_s = std::min(fixed.bwd_weight_s * drift, fixed.bwd_s);
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] -= fixed.fwd_s;
    b[i] -= fixed.bwd_s;
    w[i] = std::clamp(w[i] - fixed.bwd_weight_s, 0.0, b[i]);
    rs[i] = f[i] * layers[i].attention_flop_fraction;
    rf[i] = layers[i].block >= 0 ? f[i] : 0.0;
  }
  return fixed;
}

}  // namespace

StageCosts StageCosts::build(const cluster::Cluster& cluster, const LayerCostSource& source,
                             int microbatch_size, int max_tp, const CostConfig& config) {
  StageCosts s;
  s.cluster_ = cluster;
  s.config_ = config;
  s.microbatch_size_ = microbatch_size;
  s.max_tp_ = max_tp;
  s.layers_ = source.layers();
  s.source_description_ = source.describe_for(cluster);
  const int L = static_cast<int>(s.layers_.size());
  for (int sub = 0; sub < static_cast<int>(s.cluster_.subclusters.size()); ++sub) {
    const std::string& dev = s.cluster_.subclusters[sub].device;
    if (auto opt = source.optimizer_s_per_param_byte(s.cluster_, sub)) {
      s.optimizer_s_[dev] = *opt;
      s.optimizer_fixed_s_[dev] = source.optimizer_fixed_s(s.cluster_, sub);
    }
    const double drift = config.drift_of(s.cluster_.subclusters[sub].name);
    // Every sample count a replica may run: microbatch_size / dp for the even splits, and
    // the others for uneven shares (plan::Stage::shares; replica_figures).
    for (int samples = 1; samples <= microbatch_size; ++samples) {
      for (int tp = 1; tp <= max_tp; tp *= 2) {
        auto key = std::make_tuple(cost_key(s.cluster_.subclusters[sub], config), samples, tp);
        if (s.prefixes_.count(key)) continue;
        std::vector<Seconds> f(L), b(L), w(L), rs(L), rf(L);
        Prefix p;
        p.profiled.assign(L + 1, 0);
        bool complete = true;
        for (int i = 0; i < L && complete; ++i) {
          std::optional<LayerTime> t = source.time(s.cluster_, sub, i, samples, tp);
          if (!t) {
            complete = false;
            break;
          }
          t->fwd_s *= drift;
          t->bwd_s *= drift;
          f[i] = t->fwd_s;
          b[i] = t->bwd_s;
          w[i] = std::min(t->bwd_s, t->bwd_weight_s >= 0 ? t->bwd_weight_s * drift
                                                           : s.layers_[i].weight_grad_fraction * t->bwd_s);
          rs[i] = t->fwd_s * s.layers_[i].attention_flop_fraction;
          rf[i] = s.layers_[i].block >= 0 ? t->fwd_s : 0.0;
          const bool profiled = t->source == CostSource::kProfile;
          p.profiled[i + 1] = p.profiled[i] + (profiled ? 1 : 0);
          if (!profiled) p.base = t->source;
        }
        if (!complete) continue;
        if (p.profiled[L] == L) {
          if (auto fixed = source.stage_fixed(s.cluster_, sub, samples, tp))
            p.fixed = take_fixed_off(*fixed, drift, f, b, w, rs, rf, s.layers_);
        }
        p.fwd = prefix_of(f);
        p.bwd = prefix_of(b);
        p.wgt = prefix_of(w);
        p.rec_selective = prefix_of(rs);
        p.rec_full = prefix_of(rf);
        s.prefixes_[key] = std::move(p);
      }
    }
  }
  s.build_byte_prefixes();
  return s;
}

StageCosts StageCosts::from_tables(const cluster::Cluster& cluster, std::vector<LayerBytes> layers,
                                   const DeviceTimes& times, int microbatch_size, const CostConfig& config) {
  TableCosts table(std::move(layers), times, "(given)");
  return build(cluster, table, microbatch_size, table.max_tp(), config);
}

void StageCosts::build_byte_prefixes() {
  const size_t L = layers_.size();
  param_prefix_.assign(L + 1, 0);
  act_prefix_.assign(L + 1, 0);
  act_selective_prefix_.assign(L + 1, 0);
  act_full_prefix_.assign(L + 1, 0);
  whole_prefix_.assign(L + 1, 0);
  whole_full_prefix_.assign(L + 1, 0);
  for (size_t i = 0; i < L; ++i) {
    const LayerBytes& b = layers_[i];
    param_prefix_[i + 1] = param_prefix_[i] + b.param_bytes;
    act_prefix_[i + 1] = act_prefix_[i] + b.activation_bytes;
    act_selective_prefix_[i + 1] = act_selective_prefix_[i] + (b.activation_bytes - b.attention_score_bytes);
    const bool starts_unit = i == 0 || layers_[i - 1].block != b.block;
    act_full_prefix_[i + 1] = act_full_prefix_[i] + (b.block < 0 ? b.activation_bytes : starts_unit ? b.input_bytes : 0.0);
    // A block unit's input (full recomputation keeps it) is the whole h-wide residual.
    whole_prefix_[i + 1] = whole_prefix_[i] + b.replicated_activation_bytes;
    whole_full_prefix_[i + 1] = whole_full_prefix_[i] + (b.block < 0   ? b.replicated_activation_bytes
                                                         : starts_unit ? b.input_bytes
                                                                       : 0.0);
    working_selective_ = std::max(working_selective_, b.attention_score_bytes);
  }
  work_block_count_ = 0;
  for (const LayerBytes& b : layers_) {  // RangeView::backward_working_bytes
    const std::pair<Bytes, Bytes> w{b.largest_weight_bytes, b.backward_working_bytes};
    if (b.block < 0) {
      (&b == &layers_.front() ? work_head_ : work_tail_) = w;
    } else if (b.block == layers_[1].block && work_block_count_ < static_cast<int>(work_block_.size())) {
      work_block_[work_block_count_++] = w;  // the first block's layers stand for every block's
    }
  }
  for (size_t i = 0; i < L;) {  // the largest block unit's activations
    size_t j = i;
    Bytes unit = 0;
    for (; j < L && layers_[j].block == layers_[i].block; ++j) unit += layers_[j].activation_bytes;
    if (layers_[i].block >= 0) working_full_ = std::max(working_full_, unit);
    i = j;
  }
}

Bytes RangeView::kept_bytes(int first, int last, Recompute recompute) const {
  const Bytes* k = kept_[static_cast<int>(recompute)];
  Bytes kept = k[last] - k[first];
  // Full: a stage starting inside a block keeps its own first input for that unit.
  if (recompute == Recompute::kFull) {
    const LayerBytes& b = layers_[first];
    if (b.block >= 0 && first > 0 && layers_[first - 1].block == b.block) kept += b.input_bytes;
  }
  return kept;
}

Bytes RangeView::replicated_bytes(int first, int last, Recompute recompute) const {
  const Bytes* w = whole_[static_cast<int>(recompute)];
  Bytes whole = w[last] - w[first];
  if (recompute == Recompute::kFull) {  // as kept_bytes
    const LayerBytes& b = layers_[first];
    if (b.block >= 0 && first > 0 && layers_[first - 1].block == b.block) whole += b.input_bytes;
  }
  return whole;
}

Bytes RangeView::backward_working_bytes(int first, int last) const {
  const double grad_scale = config_ != nullptr ? config_->parameter_bytes_per_param_byte : 1.0;
  auto bytes = [&](const std::pair<Bytes, Bytes>& w) { return (w.first * grad_scale + samples_ * w.second) / tp_; };
  Bytes most = 0;
  if (last - first < work_block_count_ + 2) {  // a range that may lack some block parts: exact
    for (int l = first; l < last; ++l)
      most = std::max(most, bytes({layers_[l].largest_weight_bytes, layers_[l].backward_working_bytes}));
    return most;
  }
  if (first == 0) most = std::max(most, bytes(work_head_));
  if (last == num_layers_) most = std::max(most, bytes(work_tail_));
  if (layers_[first].block >= 0 || layers_[last - 1].block >= 0 || last - first > 2)
    for (int k = 0; k < work_block_count_; ++k) most = std::max(most, bytes(work_block_[k]));
  return most;
}

Bytes StageCosts::kept_bytes(int first, int last, Recompute recompute) const {
  RangeView v;
  set_byte_views(&v);
  return v.kept_bytes(first, last, recompute);
}

void StageCosts::set_byte_views(RangeView* v) const {
  v->params_ = param_prefix_.data();
  v->kept_[static_cast<int>(Recompute::kNone)] = act_prefix_.data();
  v->kept_[static_cast<int>(Recompute::kSelective)] = act_selective_prefix_.data();
  v->kept_[static_cast<int>(Recompute::kFull)] = act_full_prefix_.data();
  v->layers_ = layers_.data();
  v->num_layers_ = num_layers();
  v->tied_param_bytes_ = tied_param_bytes_;
  v->working_[static_cast<int>(Recompute::kSelective)] = working_selective_;
  v->working_[static_cast<int>(Recompute::kFull)] = working_full_;
  v->whole_[static_cast<int>(Recompute::kNone)] = whole_prefix_.data();
  v->whole_[static_cast<int>(Recompute::kSelective)] = whole_prefix_.data();
  v->whole_[static_cast<int>(Recompute::kFull)] = whole_full_prefix_.data();
  v->work_head_ = work_head_;
  v->work_tail_ = work_tail_;
  v->work_block_ = work_block_;
  v->work_block_count_ = work_block_count_;
}

const StageCosts::Prefix* StageCosts::prefix(int sub, int samples, int tp) const {
  auto it = prefixes_.find(std::make_tuple(cost_key(cluster_.subclusters[sub], config_), samples, tp));
  return it == prefixes_.end() ? nullptr : &it->second;
}

bool StageCosts::has(int sub, int dp, int tp) const {
  if (dp < 1 || microbatch_size_ % dp != 0) return false;
  return prefix(sub, microbatch_size_ / dp, tp) != nullptr;
}

std::string StageCosts::missing_entry(int sub, int dp, int tp) const {
  return "device " + cluster_.subclusters[sub].device + ", microbatch size " +
         std::to_string(dp > 0 ? microbatch_size_ / dp : 0) + ", tp " + std::to_string(tp);
}

RangeView StageCosts::replica_view(int sub, int samples, int tp) const {
  RangeView v = view_of(sub, samples, tp);
  v.allreduce_ = AffineTime{};
  return v;
}

RangeView StageCosts::view(int sub, int dp, int tp, int zero) const {
  HARP_CHECK(prefix(sub, microbatch_size_ / dp, tp) != nullptr) << "no times for " << missing_entry(sub, dp, tp);
  RangeView v = view_of(sub, microbatch_size_ / dp, tp);
  v.dp_ = dp;
  v.allreduce_ = dp_allreduce_time(dp, tp, cluster_.subclusters[sub]);
  v.allreduce_.per_byte_s *= config_.gradient_bytes_per_param_byte;
  // Under ZeRO each replica steps its 1/dp; a ring all-reduce is a reduce-scatter and an
  // all-gather of the same bytes, and ZeRO's all-gather moves parameters instead.
  v.zero_ = dp > 1 ? zero : 0;
  if (v.zero_ >= 1) {
    v.opt_per_param_byte_ /= dp;
    v.allreduce_.per_byte_s *= (1.0 + config_.parameter_bytes_per_param_byte / config_.gradient_bytes_per_param_byte) / 2;
  }
  return v;
}

RangeView StageCosts::view_of(int sub, int samples, int tp) const {
  const Prefix* p = prefix(sub, samples, tp);
  HARP_CHECK(p != nullptr) << "no times for device " << cluster_.subclusters[sub].device << ", " << samples
                           << " samples, tp " << tp;
  RangeView v;
  v.fwd_ = p->fwd.data();
  v.bwd_ = p->bwd.data();
  set_byte_views(&v);
  v.rec_[static_cast<int>(Recompute::kSelective)] = p->rec_selective.data();
  v.rec_[static_cast<int>(Recompute::kFull)] = p->rec_full.data();
  v.sub_ = sub;
  v.tp_ = tp;
  v.samples_ = samples;
  auto measured = optimizer_s_.find(cluster_.subclusters[sub].device);
  v.opt_per_param_byte_ = measured != optimizer_s_.end()
                              ? measured->second / tp
                              : optimizer_s_per_param_byte(tp, cluster_.device_of(sub), config_);
  auto fixed_step = optimizer_fixed_s_.find(cluster_.subclusters[sub].device);
  v.opt_fixed_ = fixed_step != optimizer_fixed_s_.end() ? fixed_step->second : 0.0;
  v.fixed_fwd_ = p->fixed.fwd_s;
  v.fixed_bwd_ = p->fixed.bwd_s;
  v.fixed_wgt_ = p->fixed.bwd_weight_s;
  v.config_ = &config_;
  return v;
}

StageFigures StageCosts::stage(int sub, int first, int last, int dp, int tp, Recompute recompute, int zero) const {
  StageFigures f = view(sub, dp, tp, zero).at(first, last, recompute);
  const Prefix* p = prefix(sub, microbatch_size_ / dp, tp);
  f.bwd_weight_s = p->weight_s(first, last, f.bwd_s);
  f.weight_grad_bytes = activation_memory_bytes(weight_grad_bytes(first, last), microbatch_size_ / dp, tp);
  return f;
}

std::string StageCosts::stage_source(int sub, int first, int last, int dp, int tp) const {
  const Prefix* p = prefix(sub, microbatch_size_ / dp, tp);
  HARP_CHECK(p != nullptr) << "no times for " << missing_entry(sub, dp, tp);
  const int profiled = p->profiled[last] - p->profiled[first];
  if (profiled == last - first) return cost_source_name(CostSource::kProfile);
  if (profiled == 0) return cost_source_name(p->base);
  return std::string(cost_source_name(CostSource::kProfile)) + "+" + cost_source_name(p->base);
}

StageFigures RangeView::at(int first, int last, Recompute recompute) const {
  StageFigures f;
  f.fwd_s = (fwd_[last] - fwd_[first]) + fixed_fwd_;
  f.bwd_s = (bwd_[last] - bwd_[first]) + fixed_bwd_;
  if (recompute != Recompute::kNone) f.bwd_s = f.bwd_s + recompute_s(first, last, recompute);
  const Bytes params = params_[last] - params_[first];
  f.allreduce_s = allreduce_.at(params);
  f.optimizer_s = opt_per_param_byte_ * params + opt_fixed_;
  f.fixed_fwd_s = fixed_fwd_;
  f.fixed_bwd_s = fixed_bwd_;
  f.fixed_step_s = opt_fixed_;
  f.working_bytes = working_set_bytes(first, last, recompute);
  f.static_bytes = static_bytes(first, last) + f.working_bytes;
  f.activation_bytes = activation_bytes(first, last, recompute);
  return f;
}

bool StageCosts::has_samples(int sub, int samples, int tp) const {
  return samples >= 1 && samples <= microbatch_size_ && prefix(sub, samples, tp) != nullptr;
}

StageFigures StageCosts::replica_figures(int sub, int samples, int tp, int first, int last, Recompute recompute) const {
  const Prefix* p = prefix(sub, samples, tp);
  HARP_CHECK(p != nullptr) << "no times for device " << cluster_.subclusters[sub].device << ", " << samples
                           << " samples, tp " << tp;
  StageFigures f;
  f.fwd_s = (p->fwd[last] - p->fwd[first]) + p->fixed.fwd_s;
  f.bwd_s = (p->bwd[last] - p->bwd[first]) + p->fixed.bwd_s;
  if (recompute == Recompute::kSelective) f.bwd_s += p->rec_selective[last] - p->rec_selective[first];
  if (recompute == Recompute::kFull) f.bwd_s += p->rec_full[last] - p->rec_full[first];
  f.bwd_weight_s = p->weight_s(first, last, f.bwd_s);
  f.fixed_fwd_s = p->fixed.fwd_s;
  f.fixed_bwd_s = p->fixed.bwd_s;
  return f;
}

std::optional<ShareSplit> StageCosts::best_mixed_shares(const std::vector<std::pair<int, int>>& replicas, int first,
                                                        int last, Recompute recompute) const {
  for (const auto& [sub, tp] : replicas)
    for (int n = 1; n <= microbatch_size_; ++n)
      if (!has_samples(sub, n, tp)) return std::nullopt;
  return best_shares(static_cast<int>(replicas.size()), microbatch_size_, [&](int d, int n) {
    const StageFigures f = replica_figures(replicas[d].first, n, replicas[d].second, first, last, recompute);
    return f.fwd_s + f.bwd_s;
  });
}

Bytes StageCosts::usable_memory_bytes(int sub) const {
  return cost::usable_memory_bytes(cluster_.device_of(sub), config_);
}

Seconds StageCosts::single_device_s(int sub) const {
  const Prefix* p = prefix(sub, microbatch_size_, 1);
  HARP_CHECK(p != nullptr);
  return (p->fwd.back() + p->fixed.fwd_s) + (p->bwd.back() + p->fixed.bwd_s);
}

}  // namespace harp::cost
