// Per-layer cost sources: where the planner's numbers come from. One interface, three
// implementations: the analytic roofline (compute_cost.h), a profile DB with the
// roofline for what it lacks, and an explicit cost table (cost_table.h). StageCosts
// (stage_costs.h) turns any of them into O(1) range figures; nothing else sums layers.
//
// Thread-safe for concurrent const calls.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/recompute.h"
#include "harp/cost/cost_config.h"
#include "harp/model/model_spec.h"
#include "harp/profile/profile_db.h"

namespace harp::cost {

// Where one layer time came from; a plan records it per stage.
enum class CostSource { kAnalytic, kProfile, kTable };
const char* cost_source_name(CostSource source);  // "analytic", "profile", "table"

// Per-sample byte figures of one layer.
struct LayerBytes {
  Bytes param_bytes = 0;       // parameters owned (fp16)
  Bytes activation_bytes = 0;  // kept for backward per in-flight microbatch
  Bytes output_bytes = 0;      // crosses a cut placed after the layer
  std::vector<std::int64_t> output_shape;  // of that tensor per sample; empty when unknown
  // Recomputation (common/recompute.h; model::Layer has the same figures). Layers with
  // the same block >= 0 form one unit that full recomputation reruns, keeping the input
  // of the unit's first layer in the stage (input_bytes); layers with block < 0 (the
  // embedding, the LM head) keep their activations. Selective recomputation frees
  // attention_score_bytes and repeats attention_flop_fraction of the layer's forward.
  int block = -1;
  Bytes input_bytes = 0;
  Bytes attention_score_bytes = 0;
  double attention_flop_fraction = 0;
  // Of the layer's backward, the share that is weight-gradient products (what a split
  // backward's W runs; schedule/zero_bubble.h): the linear layers' dW, as many FLOPs as
  // their forward, over the backward's 2x the forward. 0 for layers without products
  // (the token embedding, whose gradient the input-gradient pass computes).
  double weight_grad_fraction = 0;
  // Per sample: what a pending W keeps (model::Layer::weight_grad_bytes, scaled as
  // activation_bytes).
  Bytes weight_grad_bytes = 0;
  // model::Layer's figures of memory as the runtime spends it: of activation_bytes, what
  // every tp rank keeps whole; the backward's largest temporary per sample (both scaled as
  // activation_bytes); the largest parameter tensor's fp16 bytes (its gradient is
  // computed apart before autograd adds it into .grad).
  Bytes replicated_activation_bytes = 0;
  Bytes backward_working_bytes = 0;
  Bytes largest_weight_bytes = 0;
};

struct LayerTime {
  Seconds fwd_s = 0, bwd_s = 0;
  // Of bwd_s, the weight gradients when measured (a profile); < 0: the layer's
  // weight_grad_fraction of bwd_s.
  Seconds bwd_weight_s = -1;
  CostSource source = CostSource::kAnalytic;
};

// What a stage costs per call beyond its layers' times (profile::StageFixed): a stage of
// layers [a, b) costs the sum of its layer times - (b - a - 1) x this, i.e. this once
// plus each layer's time less it. StageCosts applies it where every layer of the range
// came from the profile.
struct StageFixedTime {
  Seconds fwd_s = 0, bwd_s = 0, bwd_weight_s = 0;
};

class LayerCostSource {
 public:
  virtual ~LayerCostSource() = default;
  // One entry per layer of the sequence; its size is L.
  virtual const std::vector<LayerBytes>& layers() const = 0;
  // Time of `layer` for `samples` samples, split tp ways, on one device of subcluster
  // `sub` of `cluster`; nullopt when the source has no entry for it.
  virtual std::optional<LayerTime> time(const cluster::Cluster& cluster, int sub, int layer,
                                        int samples, int tp) const = 0;
  // One line for reports: "analytic roofline", "profile DB p.json (roofline for ...)".
  virtual std::string describe() const = 0;
  // The same for planning on `cluster` (a profile DB says per device type what it gave).
  virtual std::string describe_for(const cluster::Cluster& cluster) const {
    (void)cluster;
    return describe();
  }
  // The optimizer step's seconds per fp16 parameter byte on one device of `sub` (tp = 1),
  // when the source measured it; nullopt: the cost model's estimate.
  virtual std::optional<Seconds> optimizer_s_per_param_byte(const cluster::Cluster& cluster, int sub) const {
    (void)cluster;
    (void)sub;
    return std::nullopt;
  }

  // The fixed cost per stage call on one device of `sub` for `samples` samples at `tp`,
  // when the source measured it; nullopt: none.
  virtual std::optional<StageFixedTime> stage_fixed(const cluster::Cluster& cluster, int sub, int samples,
                                                    int tp) const {
    (void)cluster;
    (void)sub;
    (void)samples;
    (void)tp;
    return std::nullopt;
  }
  // The optimizer step's fixed seconds per stage beyond its per-byte time (0: none).
  virtual Seconds optimizer_fixed_s(const cluster::Cluster& cluster, int sub) const {
    (void)cluster;
    (void)sub;
    return 0;
  }

  // Looks up `view_device` as `real_device` (a planning view that renames device types,
  // e.g. the homogeneous baseline, still finds the measured entries).
  virtual void alias_device(const std::string& view_device, const std::string& real_device) {
    aliases_[view_device] = real_device;
  }

 protected:
  const std::string& real_device(const std::string& name) const {
    auto it = aliases_.find(name);
    return it == aliases_.end() ? name : it->second;
  }

 private:
  std::map<std::string, std::string> aliases_;
};

// `activation_scale` multiplies the model's fp16 activation, cut and input bytes
// (CostConfig::activation_bytes_scale).
std::vector<LayerBytes> layer_bytes_of(const model::ModelSpec& model, double activation_scale = 1.0);

// The roofline for every layer, device, samples and tp.
class AnalyticCosts : public LayerCostSource {
 public:
  // REQUIRES: model outlives the source.
  AnalyticCosts(const model::ModelSpec& model, CostConfig config);
  const std::vector<LayerBytes>& layers() const override { return bytes_; }
  std::optional<LayerTime> time(const cluster::Cluster& cluster, int sub, int layer, int samples,
                                int tp) const override;
  // "analytic roofline: 50% of each device's fp16/bf16 peak, 70% of its memory bandwidth
  // (defaults, ...)": what the times rest on.
  std::string describe() const override;
  // Per device type of `cluster`: the dtype, the peak and efficiency it is priced at and
  // their source (efficiency.h).
  std::string describe_for(const cluster::Cluster& cluster) const override;

 private:
  const model::ModelSpec& model_;
  CostConfig config_;
  std::vector<LayerBytes> bytes_;
};

// Profile DB entries keyed by (device type, layer signature, samples, tp); the roofline
// for any key the DB lacks (recorded as kAnalytic, so a plan shows the mix), anchored
// where the DB measured that device and layer (at tp 1, else the smallest tp measured):
// scaled by measured / roofline at the nearest samples count, so that unmeasured shapes
// (another tp) are not judged by the bare roofline against measured ones.
class ProfiledCosts : public LayerCostSource {
 public:
  // REQUIRES: model and db outlive the source. `file` names the DB in reports.
  ProfiledCosts(const model::ModelSpec& model, const profile::ProfileDb& db, CostConfig config,
                std::string file);
  const std::vector<LayerBytes>& layers() const override { return analytic_.layers(); }
  std::optional<LayerTime> time(const cluster::Cluster& cluster, int sub, int layer, int samples,
                                int tp) const override;
  std::string describe() const override;
  // Per device type of `cluster`: measured (how), imported, or analytic (not in the DB).
  std::string describe_for(const cluster::Cluster& cluster) const override;
  std::optional<Seconds> optimizer_s_per_param_byte(const cluster::Cluster& cluster, int sub) const override;
  // The device record's stage_fixed at the nearest microbatch size (tp 1 only: other tp
  // come from the roofline) and optimizer_fixed_s.
  std::optional<StageFixedTime> stage_fixed(const cluster::Cluster& cluster, int sub, int samples,
                                            int tp) const override;
  Seconds optimizer_fixed_s(const cluster::Cluster& cluster, int sub) const override;

  // Refuses a DB that cannot describe this job: a device type of the cluster with entries
  // but none for the model's layer signatures (a profile of another model shape), or one
  // measured in another dtype than `dtype` (the training dtype). FailedPrecondition
  // naming the file, the device, what was profiled and the command that fixes it.
  static Status check(const profile::ProfileDb& db, const model::ModelSpec& model,
                      const cluster::Cluster& cluster, const std::string& dtype, const std::string& file);

 private:
  const model::ModelSpec& model_;
  const profile::ProfileDb& db_;
  AnalyticCosts analytic_;
  std::string file_;
};

// Calibration from a training run: per device type, factors that scale a source's
// forward and backward times so that it predicts the stage times a run measured
// (`harp train` writes them to OUT/measured_plan.json; `harp plan --calibrate FILE`).
struct MeasuredStage {
  int subcluster = 0;
  int first_layer = 0, last_layer = 0;
  int samples = 1;             // per replica
  Seconds fwd_s = 0, bwd_s = 0;  // measured per microbatch
  // What the stage recomputed: its measured backward includes that forward, which is
  // taken out (as the predicted share of the measured forward) before comparing.
  Recompute recompute = Recompute::kNone;
};
struct Calibration {
  std::string file;
  std::map<std::string, std::pair<double, double>> factors;  // device -> (fwd, bwd)
  std::string describe() const;  // "cpu x1.08 / x1.12, cpu-slow x0.95 / x0.97"
};
// Factor = sum of measured over sum of predicted, per device over its stages.
// InvalidArgument when `source` has no time for a stage's layers or a sum is zero.
StatusOr<Calibration> calibrate(const LayerCostSource& source, const cluster::Cluster& cluster,
                                const std::vector<MeasuredStage>& stages, const std::string& file);

// `base` with every time of a calibrated device type scaled by its factors.
class CalibratedCosts : public LayerCostSource {
 public:
  // REQUIRES: base outlives this (aliases given to this source reach it too).
  CalibratedCosts(LayerCostSource& base, Calibration calibration);
  const std::vector<LayerBytes>& layers() const override { return base_.layers(); }
  std::optional<LayerTime> time(const cluster::Cluster& cluster, int sub, int layer, int samples,
                                int tp) const override;
  std::string describe() const override;
  std::string describe_for(const cluster::Cluster& cluster) const override;
  std::optional<Seconds> optimizer_s_per_param_byte(const cluster::Cluster& cluster, int sub) const override {
    return base_.optimizer_s_per_param_byte(cluster, sub);
  }
  // The base's, scaled by the device's factors as its layer times are.
  std::optional<StageFixedTime> stage_fixed(const cluster::Cluster& cluster, int sub, int samples,
                                            int tp) const override;
  Seconds optimizer_fixed_s(const cluster::Cluster& cluster, int sub) const override {
    return base_.optimizer_fixed_s(cluster, sub);
  }
  void alias_device(const std::string& view_device, const std::string& real_device) override;

 private:
  LayerCostSource& base_;
  Calibration calibration_;
};

}  // namespace harp::cost
