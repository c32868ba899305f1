// StageCosts: everything a search needs about a candidate stage, answered in O(1) from
// prefix sums: compute time of a layer range on a subcluster's mesh, the all-reduce and
// optimizer terms, memory, and the bytes crossing a cut. Built once per problem from one
// layer cost source (layer_costs.h: analytic, profile DB, cost table), so every strategy,
// the brute-force reference and the plan builder see identical numbers. This is the only
// place that sums layer figures over a range.
//
// Thread-safe for concurrent const calls.
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/recompute.h"
#include "harp/common/status.h"
#include "harp/cost/comm_cost.h"
#include "harp/cost/cost_config.h"
#include "harp/cost/cost_table.h"
#include "harp/cost/layer_costs.h"
#include "harp/cost/memory_cost.h"
#include "harp/cost/shares.h"

namespace harp::cost {

struct StageFigures {
  // bwd_s includes the forward the backward repeats under recomputation.
  Seconds fwd_s = 0, bwd_s = 0;
  // Of bwd_s, the weight-gradient products (a split backward's W: measured where the
  // profile timed it apart, else each layer's weight_grad_fraction of its backward), and
  // per device what a pending W keeps per microbatch: filled by StageCosts::stage, 0 from
  // RangeView::at.
  Seconds bwd_weight_s = 0;
  Bytes weight_grad_bytes = 0;
  Seconds allreduce_s = 0, optimizer_s = 0;
  // Per device: training state + workspace + working_bytes.
  Bytes static_bytes = 0;
  // Of static_bytes: what a backward holds for a moment beyond the kept activations (its
  // largest temporary and weight-gradient copy; recomputation's rebuilt activations).
  Bytes working_bytes = 0;
  Bytes activation_bytes = 0;  // per device per in-flight microbatch
  // Of fwd_s, bwd_s and optimizer_s: the stage's fixed cost per call (a profile's
  // stage_fixed and optimizer_fixed_s; layer_costs.h), 0 where none was measured.
  Seconds fixed_fwd_s = 0, fixed_bwd_s = 0, fixed_step_s = 0;

  Seconds compute_s() const { return fwd_s + bwd_s; }
  Seconds end_s() const { return allreduce_s + optimizer_s; }
  Bytes memory_bytes(int launch_count) const { return static_bytes + launch_count * activation_bytes; }
};

class StageCosts;

// A fast handle for one (subcluster, dp, tp): figures of any layer range in O(1) with no
// lookups, for search inner loops. Valid while its StageCosts lives.
class RangeView {
 public:
  StageFigures at(int first, int last, Recompute recompute = Recompute::kNone) const;
  // Rounded exactly as the plan builder's fwd_s + bwd_s, so a cap equals a plan's P bit
  // for bit (the δ thresholds and the attained test compare them).
  // Each includes the stage's fixed cost per call once (fixed_fwd_, fixed_bwd_).
  Seconds compute_s(int first, int last) const {
    return ((fwd_[last] - fwd_[first]) + fixed_fwd_) + ((bwd_[last] - bwd_[first]) + fixed_bwd_);
  }
  Seconds compute_s(int first, int last, Recompute recompute) const {
    if (recompute == Recompute::kNone) return compute_s(first, last);
    return ((fwd_[last] - fwd_[first]) + fixed_fwd_) +
           (((bwd_[last] - bwd_[first]) + fixed_bwd_) + recompute_s(first, last, recompute));
  }
  // The forward that recomputation repeats in the backward (0 for kNone).
  Seconds recompute_s(int first, int last, Recompute recompute) const {
    const Seconds* r = rec_[static_cast<int>(recompute)];
    return r == nullptr ? 0.0 : r[last] - r[first];
  }
  // A stage that holds the LM head but not the token embedding of a tied model keeps its
  // own copy of the tied weight (the model counts it once, at the embedding).
  Bytes static_bytes(int first, int last) const {
    const Bytes copy = last == num_layers_ && first > 0 ? tied_param_bytes_ : 0;
    // The runtime leaves the tied weight whole under ZeRO (it has its own group).
    const Bytes whole = first == 0 || last == num_layers_ ? tied_param_bytes_ : 0;
    return static_memory_bytes(params_[last] - params_[first] + copy, tp_, dp_, zero_, *config_, whole);
  }
  // Per device and in-flight microbatch: what layers [first, last) keep, the tp-sharded
  // part split tp ways and the replicated part whole, plus the stage's output, which the
  // runtime holds (whole: the cut tensor it sent) until the microbatch's backward.
  Bytes activation_bytes(int first, int last, Recompute recompute = Recompute::kNone) const {
    const Bytes kept = kept_bytes(first, last, recompute), whole = replicated_bytes(first, last, recompute);
    return activation_memory_bytes(kept - whole, samples_, tp_) + samples_ * (whole + held_output_bytes(first, last));
  }
  // Per sample: the stage's output while its backward is pending (0 for the last stage).
  // Unlike the rest of a stage's memory it may shrink as the stage grows (a cut inside a
  // block carries more than the residual); activation_bytes less held_bytes does not.
  Bytes held_output_bytes(int /*first*/, int last) const {
    return last < num_layers_ ? layers_[last - 1].output_bytes : 0.0;
  }
  // Per device and in-flight microbatch: of activation_bytes, the held output.
  Bytes held_bytes(int first, int last) const { return samples_ * held_output_bytes(first, last); }
  // Per sample before the tp split: StageCosts::kept_bytes; of it, what every tp rank
  // keeps whole.
  Bytes kept_bytes(int first, int last, Recompute recompute) const;
  Bytes replicated_bytes(int first, int last, Recompute recompute) const;
  // What a backward holds at once on top of what is kept, per device: its largest
  // temporary and weight-gradient copy (backward_working_bytes), plus recomputation's:
  // the largest block's activations (full) or attention scores (selective) of one
  // microbatch. The model's largest, not the range's: an upper bound in O(1).
  Bytes working_set_bytes(int first, int last, Recompute recompute) const {
    return backward_working_bytes(first, last) +
           activation_memory_bytes(working_[static_cast<int>(recompute)], samples_, tp_);
  }
  // Of one microbatch's backward over [first, last): the largest of its layers'
  // temporaries (LayerBytes::backward_working_bytes, split tp ways) with the gradient of
  // their largest weight (in the master weights' dtype), computed apart before autograd
  // adds it into .grad. Exact: a range long enough to hold every part of a block takes the
  // largest over the first block's parts (every block alike) in O(1).
  Bytes backward_working_bytes(int first, int last) const;
  // All-reduce plus optimizer step of the range.
  Seconds end_s(int first, int last) const {
    const Bytes params = params_[last] - params_[first];
    return allreduce_.at(params) + (opt_per_param_byte_ * params + opt_fixed_);
  }

 private:
  friend class StageCosts;
  AffineTime allreduce_;
  Seconds opt_per_param_byte_ = 0;
  Seconds opt_fixed_ = 0;                                  // the optimizer step's per stage
  Seconds fixed_fwd_ = 0, fixed_bwd_ = 0, fixed_wgt_ = 0;  // per call (StageFixedTime)
  const CostConfig* config_ = nullptr;
  const Seconds* fwd_ = nullptr;
  const Seconds* bwd_ = nullptr;
  const Bytes* params_ = nullptr;
  const Seconds* rec_[kRecomputeModes] = {nullptr, nullptr, nullptr};  // by Recompute
  const Bytes* kept_[kRecomputeModes] = {nullptr, nullptr, nullptr};   // activations kept, by Recompute
  const LayerBytes* layers_ = nullptr;
  Bytes working_[kRecomputeModes] = {0, 0, 0};  // per sample, by Recompute
  const Bytes* whole_[kRecomputeModes] = {nullptr, nullptr, nullptr};  // replicated part of kept_
  // (largest weight's fp16 bytes, backward temporary per sample) of the token embedding,
  // the LM head and each distinct block layer (backward_working_bytes)
  std::pair<Bytes, Bytes> work_head_{0, 0}, work_tail_{0, 0};
  std::array<std::pair<Bytes, Bytes>, 4> work_block_{};
  int work_block_count_ = 0;
  int sub_ = 0, dp_ = 1, tp_ = 1, samples_ = 1;
  int zero_ = 0;  // ZeRO level (0 when dp is 1)
  int num_layers_ = 0;
  Bytes tied_param_bytes_ = 0;
};

class StageCosts {
 public:
  using LayerBytes = cost::LayerBytes;
  using LayerTimes = cost::LayerTimes;

  // Layer times from `source` for every samples from 1 to microbatch_size (the even
  // splits microbatch_size / dp, and uneven shares) and every power-of-two tp up to
  // max_tp; a (device, samples, tp) for which the source lacks any layer is left out
  // (has() is false for it).
  static StageCosts build(const cluster::Cluster& cluster, const LayerCostSource& source,
                          int microbatch_size, int max_tp, const CostConfig& config);

  // The same from explicit tables: `times[device][samples]` (and its tp entries).
  static StageCosts from_tables(const cluster::Cluster& cluster, std::vector<LayerBytes> layers,
                                const DeviceTimes& times, int microbatch_size, const CostConfig& config);

  const cluster::Cluster& cluster() const { return cluster_; }
  const CostConfig& config() const { return config_; }
  const std::string& source_description() const { return source_description_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  int microbatch_size() const { return microbatch_size_; }
  int max_tp() const { return max_tp_; }
  const std::vector<LayerBytes>& layers() const { return layers_; }

  // Whether times exist for subcluster `sub` with this dp x tp shape.
  bool has(int sub, int dp, int tp) const;
  // Which entry is missing for (sub, dp, tp), for error messages.
  std::string missing_entry(int sub, int dp, int tp) const;
  // REQUIRES: has(sub, dp, tp), 0 <= first < last <= num_layers().
  // `zero`: the stage's ZeRO level (runtime/exec/zero.h; no effect when dp is 1).
  StageFigures stage(int sub, int first, int last, int dp, int tp,
                     Recompute recompute = Recompute::kNone, int zero = 0) const;
  // Whether times exist for one replica of `sub` running `samples` samples at `tp`.
  bool has_samples(int sub, int samples, int tp) const;
  // One replica's compute on layers [first, last) for `samples` samples of a microbatch
  // (fwd_s, bwd_s with `recompute`'s repeated forward, bwd_weight_s; the rest 0): a
  // replica of a stage with uneven shares. REQUIRES has_samples(sub, samples, tp).
  StageFigures replica_figures(int sub, int samples, int tp, int first, int last,
                               Recompute recompute = Recompute::kNone) const;
  // The microbatch split over replicas (subcluster, tp) of layers [first, last) that
  // makes the slowest replica fastest (shares.h), by their times at every sample count;
  // nullopt when some count lacks times or the replicas outnumber the samples.
  std::optional<ShareSplit> best_mixed_shares(const std::vector<std::pair<int, int>>& replicas, int first,
                                              int last, Recompute recompute = Recompute::kNone) const;
  // Activation bytes per sample (before the tp split) that layers [first, last) keep
  // per in-flight microbatch under `recompute` (layer_costs.h, LayerBytes).
  Bytes kept_bytes(int first, int last, Recompute recompute) const;
  // One replica of `sub` running `samples` samples of each microbatch at `tp`, alone
  // (no all-reduce, no ZeRO): a part of a mixed stage (mixed_stage.h).
  // REQUIRES: has_samples(sub, samples, tp).
  RangeView replica_view(int sub, int samples, int tp) const;
  // REQUIRES: has(sub, dp, tp).
  RangeView view(int sub, int dp, int tp, int zero = 0) const;
  // Per sample before the tp split: what layers [first, last) keep from a split backward's
  // I to its W (LayerBytes::weight_grad_bytes).
  Bytes weight_grad_bytes(int first, int last) const {
    Bytes b = 0;
    for (int l = first; l < last; ++l) b += layers_[l].weight_grad_bytes;
    return b;
  }
  // Parameter bytes of layers [first, last) (fp16 convention, LayerBytes::param_bytes).
  Bytes param_bytes(int first, int last) const { return param_prefix_[last] - param_prefix_[first]; }
  // Bytes crossing a cut after layer `layer` for one microbatch.
  Bytes cut_bytes(int layer) const { return layers_[layer].output_bytes * microbatch_size_; }
  Bytes usable_memory_bytes(int sub) const;
  // Where the times of a stage came from: "analytic", "profile", "table", or
  // "profile+analytic" when a profile DB covered only some of its layers.
  // REQUIRES: has(sub, dp, tp).
  std::string stage_source(int sub, int first, int last, int dp, int tp) const;
  // Time of one layer range per microbatch on one device of `sub` with dp = tp = 1 and
  // the whole microbatch (for lower bounds). REQUIRES has(sub, 1, 1).
  Seconds single_device_s(int sub) const;
  // Parameter bytes (fp16 convention, as LayerBytes::param_bytes) shared by the first and
  // the last layer (GPT's tied token embedding and LM head): their gradients are summed
  // over the first and last stages at the end of each iteration. 0 when nothing is tied.
  Bytes tied_param_bytes() const { return tied_param_bytes_; }
  void set_tied_param_bytes(Bytes bytes) { tied_param_bytes_ = bytes; }

 private:
  friend class RangeView;
  struct Prefix {
    std::vector<Seconds> fwd, bwd;  // size L + 1
    std::vector<Seconds> wgt;       // of bwd, the weight gradients (a split backward's W)
    // The forward repeated by selective and by full recomputation, size L + 1.
    std::vector<Seconds> rec_selective, rec_full;
    std::vector<int> profiled;      // size L + 1: layers whose time came from a profile DB
    // Per call, added once per stage (the layers' times above are less it); zero unless
    // every layer came from the profile and it measured the term.
    StageFixedTime fixed;
    // The weight gradients' part of [first, last)'s backward (its fixed part included),
    // at most `bwd_s`, the range's whole backward.
    Seconds weight_s(int first, int last, Seconds bwd_s) const {
      return std::min((wgt[last] - wgt[first]) + fixed.bwd_weight_s, bwd_s);
    }
    CostSource base = CostSource::kAnalytic;  // the source of the other layers
  };
  const Prefix* prefix(int sub, int samples, int tp) const;
  // A view of one replica running `samples` at `tp` (dp 1, no all-reduce yet).
  RangeView view_of(int sub, int samples, int tp) const;
  void build_byte_prefixes();
  void set_byte_views(RangeView* v) const;

  cluster::Cluster cluster_;
  CostConfig config_;
  std::string source_description_;
  int microbatch_size_ = 1;
  int max_tp_ = 1;
  std::vector<LayerBytes> layers_;
  std::vector<Bytes> param_prefix_, act_prefix_;  // size L + 1
  // Kept under selective (without the attention scores) and full recomputation (block
  // units' first inputs; other layers' activations), size L + 1.
  std::vector<Bytes> act_selective_prefix_, act_full_prefix_;
  // Of act_prefix_ (and act_selective_prefix_), and of act_full_prefix_: what every tp rank
  // keeps whole, size L + 1.
  std::vector<Bytes> whole_prefix_, whole_full_prefix_;
  Bytes working_selective_ = 0, working_full_ = 0;  // RangeView::working_set_bytes, per sample
  // RangeView::backward_working_bytes: the embedding's, the LM head's and the first
  // block's layers' (largest weight, backward temporary per sample)
  std::pair<Bytes, Bytes> work_head_{0, 0}, work_tail_{0, 0};
  std::array<std::pair<Bytes, Bytes>, 4> work_block_{};
  int work_block_count_ = 0;
  // key (device name, samples, tp)
  std::map<std::tuple<std::string, int, int>, Prefix> prefixes_;
  // device name -> the source's measured optimizer seconds per parameter byte (tp = 1)
  std::map<std::string, Seconds> optimizer_s_;
  std::map<std::string, Seconds> optimizer_fixed_s_;
  Bytes tied_param_bytes_ = 0;
};

}  // namespace harp::cost
