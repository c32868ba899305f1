// The cost model the planner and the CLI use: per-layer times from a profile DB when it
// has the entry, the analytic roofline otherwise; communication and memory terms.
// Thread-safe for concurrent const calls.
#pragma once

#include <memory>

#include "harp/cluster/cluster.h"
#include "harp/cost/comm_cost.h"
#include "harp/cost/compute_cost.h"
#include "harp/cost/cost_config.h"
#include "harp/cost/memory_cost.h"
#include "harp/model/model_spec.h"
#include "harp/profile/profile_db.h"

namespace harp::cost {

struct StageTime {
  Seconds fwd_s = 0, bwd_s = 0;
  int measured_layers = 0;  // how many layer times came from the profile DB
};

class CostModel {
 public:
  // REQUIRES: cluster, model (and db when non-null) outlive the CostModel.
  CostModel(const cluster::Cluster& cluster, const model::ModelSpec& model,
            const profile::ProfileDb* db, CostConfig config);

  const CostConfig& config() const { return config_; }
  const cluster::Cluster& cluster() const { return cluster_; }
  const model::ModelSpec& model() const { return model_; }

  // One layer on one device of subcluster `sub` with `samples` samples, split tp ways.
  LayerTime layer_time(int sub, int layer, int samples, int tp) const;
  // Layers [first, last) on subcluster `sub`: each dp replica runs microbatch_size/dp
  // samples (rounded up).
  StageTime stage_time(int sub, int first, int last, int microbatch_size, int dp, int tp) const;
  // Bytes crossing a cut after layer `layer` for a microbatch.
  Bytes cut_bytes(int layer, int microbatch_size) const;
  // Gradient all-reduce of layers [first, last) over dp replicas of subcluster `sub`;
  // inside a node when dp fits a node, else over the inter-node link.
  Seconds allreduce_s(int sub, int first, int last, int dp, int tp) const;
  // Optimizer step of layers [first, last) per device: reads and writes the training
  // state once at the memory bandwidth (memory bound).
  Seconds optimizer_s(int sub, int first, int last, int tp) const;
  StageMemory memory(int first, int last, int microbatch_size, int dp, int tp) const;

 private:
  const cluster::Cluster& cluster_;
  const model::ModelSpec& model_;
  const profile::ProfileDb* db_;
  CostConfig config_;
};

}  // namespace harp::cost
