// The Plan: what the planner writes and the simulator, the CLI and the runtime read.
// A plan is self-contained for simulation: every stage carries its own times.
// JSON format in docs/file_formats.md (plan_io.h reads and writes it).
//
// Invariants of a Plan returned by parse_plan: at least one stage; microbatches >= 1;
// every time is finite and >= 0; fwd_s + bwd_s > 0 per stage; launch counts (when
// given) are >= 1; when `layers` are given they are contiguous and increasing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/recompute.h"
#include "harp/common/units.h"

namespace harp::plan {

// The zero-bubble kinds split each backward into I (input gradient) and W (weight
// gradients) (docs/schedule_format.md): ZB-H1 and ZB-H2 after Qi et al. (ICLR'24) on
// 1F1B's and twice 1F1B's in-flight microbatches, harp-zb on HARP's launch counts with
// the W actions placed into the gaps the plan's times leave.
enum class ScheduleKind { kGpipe, k1F1B, kHarp1F1B, kZbH1, kZbH2, kHarpZb };

// "gpipe", "1f1b", "harp-1f1b", "zb-h1", "zb-h2", "harp-zb"
const char* schedule_kind_name(ScheduleKind kind);
// Every schedule's name, for readers and flags' checks, in the order above.
const std::vector<std::string>& schedule_kind_names();
// Parses a schedule name; false if unknown.
bool parse_schedule_kind(const std::string& name, ScheduleKind* out);
// Whether the kind runs split backwards (I and W); whether its launch counts come from
// HARP's δ rule (harp-1f1b, harp-zb).
inline bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbH2 || kind == ScheduleKind::kHarpZb;
}
inline bool uses_delta_rule(ScheduleKind kind) {
  return kind == ScheduleKind::kHarp1F1B || kind == ScheduleKind::kHarpZb;
}

// Who made a plan (docs/planner.md): the exact search with HARP's 1F1B, the Alpa-style
// search that believes every device is the slowest type, or Megatron's uniform split.
enum class Strategy { kHarp, kHomogeneous, kUniform };
const char* strategy_name(Strategy strategy);  // "harp", "homogeneous", "uniform"
bool parse_strategy(const std::string& name, Strategy* out);
// Every strategy, in the order reports list them.
inline constexpr Strategy kAllStrategies[] = {Strategy::kHarp, Strategy::kHomogeneous,
                                              Strategy::kUniform};

struct Stage {
  int first_layer = -1, last_layer = -1;  // layers [first, last); -1 when not given
  int subcluster = -1;                    // index into the cluster's subclusters; -1 unknown
  std::string subcluster_name;
  std::vector<int> devices;               // global device ids (dp x tp of them)
  // The machine of each device (Cluster::node_of_device, parallel to `devices`): which
  // launcher of `harp launch --nnodes` runs its rank. Empty when unknown (hand-written).
  std::vector<int> nodes;
  int dp = 1, tp = 1;
  // Samples of every microbatch each data-parallel replica takes, in replica order
  // (uneven shares: replicas of different speeds); they sum to the plan's
  // microbatch_size. Empty: microbatch_size / dp each (dp then divides it).
  std::vector<int> shares;
  // What the stage recomputes in the backward (common/recompute.h); bwd_s includes it
  // and activation_bytes is what it keeps.
  Recompute recompute = Recompute::kNone;
  // Sharding of the optimizer state over the stage's data-parallel group
  // (runtime/exec/zero.h): 0 none, 1 Adam's moments (ZeRO-1), 2 and the gradients
  // (ZeRO-2). No effect when dp is 1.
  int zero = 0;
  int launch_count = 0;                   // N_i; 0 = derive from the schedule kind
  Seconds fwd_s = 0, bwd_s = 0;           // per microbatch on this stage's mesh
  // Of bwd_s, the weight gradients (a split backward's W; the rest is its I); 0 when
  // unknown, and then a zero-bubble schedule has nothing to move.
  Seconds bwd_weight_s = 0;
  Seconds comm_s = 0;                     // one-way transfer to the next stage (0 for the last)
  Seconds comm_latency_s = 0;             // latency part of comm_s (link stays free meanwhile)
  // The link to the next stage leaves the node (another node or another subcluster):
  // the δ rule applies to it. Inside a node δ = 1.
  bool crosses_nodes = false;
  Seconds allreduce_s = 0;                // data-parallel gradient all-reduce
  Seconds optimizer_s = 0;                // optimizer step
  // Of fwd_s, bwd_s and optimizer_s: the stage's fixed cost per call (a profile's
  // stage_fixed, cost/layer_costs.h); 0 where the cost source has none. Shown apart by
  // `harp trace compare`.
  Seconds fixed_fwd_s = 0, fixed_bwd_s = 0, fixed_step_s = 0;
  Bytes memory_static_bytes = 0;          // params, grads, optimizer state, workspace per device
  // Of memory_static_bytes: what a backward holds for a moment (its largest temporary and
  // weight-gradient copy, recomputation's rebuilt activations); 0 when unknown.
  Bytes memory_working_bytes = 0;
  Bytes activation_bytes = 0;             // kept per in-flight microbatch per device
  // Kept per microbatch per device from a split backward's I to its W (the linear
  // layers' inputs and output gradients); 0 when unknown.
  Bytes weight_grad_bytes = 0;
  Bytes memory_bytes = 0;                 // static + launch_count x activation (planner's figure)
  // What one of the stage's devices may hold (the cluster's memory less the reserve); 0
  // when unknown. harp-zb keeps every stage under it (schedule/zero_bubble.h).
  Bytes usable_memory_bytes = 0;
  Bytes comm_bytes = 0;                   // bytes crossing to the next stage per microbatch
  // Emulation only (cluster devices' emulated_slowdown): the runtime, when asked to
  // emulate, keeps this stage's compute waiting (factor - 1) x its measured time.
  double emulated_slowdown = 1.0;
  // Per data-parallel replica when they are of different device types (with `shares`):
  // each replica's own factor; empty: emulated_slowdown for every replica.
  std::vector<double> replica_slowdowns;
  // A mixed stage (replicas of several device types, after Sailor's mixed data-parallel
  // groups): per replica its device type and its compute per microbatch (fwd + bwd at its
  // share); fwd_s and bwd_s are the slowest replica's, and memory_static_bytes,
  // activation_bytes and usable_memory_bytes those of the replica with the least room
  // left at launch_count. Empty: every replica is `device`.
  std::vector<std::string> replica_devices;
  std::vector<Seconds> replica_compute_s;
  bool mixed() const { return !replica_devices.empty(); }
  // A mixed stage's replicas by device type in order, "1 x A100 + 2 x V100"; "" when not mixed.
  std::string replica_summary() const;
  // The shares as a ratio, "4:2:2"; "" when even.
  std::string shares_ratio() const;
  double slowdown_of(int d) const {
    return replica_slowdowns.empty() ? emulated_slowdown : replica_slowdowns[static_cast<size_t>(d)];
  }
  // The stage's device type and its declared peak (dense fp16/bf16 TFLOP/s; the cluster
  // file's, for an emulated type too): the runtime's model FLOPs utilisation is against
  // it; a mixed stage's peak is the mean over its devices. Empty and 0 in hand-written
  // plans and plans from before: no utilisation then.
  std::string device;
  double peak_tflops = 0;
  // Where fwd_s and bwd_s came from: "analytic", "profile", "table", "profile+analytic",
  // "measured" (re-timed by a training run); empty for hand-written plans.
  std::string cost_source;
  // Shape per sample of the tensor this stage sends to the next ({seq_len, width});
  // empty for the last stage and when unknown (cost tables, hand-written plans).
  std::vector<std::int64_t> cut_shape;

  Seconds compute_s() const { return fwd_s + bwd_s; }
  // Replica d's samples of a microbatch of `microbatch_size`, and the first of them.
  int share(int d, int microbatch_size) const {
    return shares.empty() ? microbatch_size / dp : shares[static_cast<size_t>(d)];
  }
  int share_offset(int d, int microbatch_size) const {
    if (shares.empty()) return d * (microbatch_size / dp);
    int first = 0;
    for (int e = 0; e < d; ++e) first += shares[static_cast<size_t>(e)];
    return first;
  }
  // The largest share: what the stage's slowest-loaded replica runs (its fwd_s and bwd_s
  // are that replica's when the shares are uneven).
  int largest_share(int microbatch_size) const {
    int most = 0;
    for (int d = 0; d < dp; ++d) most = std::max(most, share(d, microbatch_size));
    return most;
  }
};

struct Prediction {
  Seconds iteration_s = 0;
  Seconds period_s = 0;        // P = max(max t_i, max c_i)
  Seconds round_trip_s = 0;    // sum(t_i + 2 c_i)
  Seconds steady_s = 0;        // (B - 1) P
  Seconds end_s = 0;           // max_i (ar_i + opt_i): the stage that finishes last
  double bubble_fraction = 0;
};

struct Plan {
  int version = 1;
  std::string cluster_fingerprint, model_fingerprint;  // empty for hand-written plans
  std::string model_name;
  int microbatches = 1;          // B
  int microbatch_size = 1;       // samples per microbatch (split over dp)
  ScheduleKind schedule = ScheduleKind::k1F1B;
  std::vector<Stage> stages;
  Prediction predicted;
  std::string strategy;          // strategy_name(), or "" for hand-written plans
  double search_wall_s = 0;
  std::string cost_source;       // the cost source's description (cost/layer_costs.h)
  int granularity = 0;           // sub-layers per block of the planned model; 0 unknown
  // The planned model's spec (model::model_to_json), so the runtime rebuilds exactly it;
  // null when unknown (cost tables, hand-written plans).
  Json model_config;

  int num_stages() const { return static_cast<int>(stages.size()); }
  // Every device some stage uses, in increasing id: rank r runs the r-th (the runtime's
  // rank layout, plan/rank_layout.h).
  std::vector<int> used_devices() const;
  // The machine of device `device` (the stages' `nodes`); -1 when the plan does not say.
  int node_of_device(int device) const;
  // Ranks per machine in machine order (rank r runs the r-th used device), e.g. {6, 4};
  // empty when the plan does not say where every device is.
  std::vector<int> ranks_per_node() const;
};

}  // namespace harp::plan
