// Explicit cost tables (docs/file_formats.md, "Cost table"): per-layer times given by
// hand or measured elsewhere, so planner tests can pin exact numbers.
//
//   {"version": 1, "microbatch_size": 4,
//    "layers": [{"name": "embed", "param_bytes": 1.2e8, "output_bytes": 4.2e6,
//                "activation_bytes": 9.0e6}, ...],
//    "devices": {"V100-32GB": {"4": {"fwd_s": [...], "bwd_s": [...],
//                                   "tp": {"2": {"fwd_s": [...], "bwd_s": [...]}}}, "2": {...}}, ...}}
//
// Bytes are per sample. `devices` maps a device type of the cluster to per-microbatch-
// size lists (tp = 1, and optionally per tp degree); a stage with dp replicas uses the
// entry for microbatch_size / dp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/cost/layer_costs.h"

namespace harp::cost {

// Forward and backward seconds of every layer for one (device type, samples): tp = 1,
// and under `tp` for the tensor-parallel degrees the table lists (their collectives
// included).
struct Times {
  std::vector<Seconds> fwd_s, bwd_s;
};
struct LayerTimes : Times {
  std::map<int, Times> tp;  // tp degree (2, 4, ...) -> times
};
using DeviceTimes = std::map<std::string, std::map<int, LayerTimes>>;  // device -> samples

struct CostTable {
  int microbatch_size = 1;
  std::vector<std::string> layer_names;
  std::vector<LayerBytes> layers;
  DeviceTimes times;
};

// The table as a cost source: the samples and tp degrees it lists.
class TableCosts : public LayerCostSource {
 public:
  TableCosts(std::vector<LayerBytes> layers, DeviceTimes times, std::string file);
  const std::vector<LayerBytes>& layers() const override { return layers_; }
  std::optional<LayerTime> time(const cluster::Cluster& cluster, int sub, int layer, int samples,
                                int tp) const override;
  std::string describe() const override { return "cost table " + file_; }
  // The largest tp degree any entry lists (1 when none does).
  int max_tp() const;

 private:
  std::vector<LayerBytes> layers_;
  DeviceTimes times_;
  std::string file_;
};

StatusOr<CostTable> parse_cost_table(const Json& node, const std::string& file);
StatusOr<CostTable> load_cost_table(const std::string& file);

// Checks the table against a cluster: every device type of the cluster has an entry for
// the full microbatch (dp = 1), and every device named in the table is in the cluster.
Status check_cost_table(const CostTable& table, const cluster::Cluster& cluster,
                        const std::string& file);

}  // namespace harp::cost
