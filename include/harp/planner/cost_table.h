// Explicit cost tables (docs/file_formats.md, "Cost table"): per-layer times given by
// hand or measured elsewhere, so planner tests can pin exact numbers.
//
//   {"version": 1, "microbatch_size": 4,
//    "layers": [{"name": "embed", "param_bytes": 1.2e8, "output_bytes": 4.2e6,
//                "activation_bytes": 9.0e6}, ...],
//    "devices": {"V100-32GB": {"4": {"fwd_s": [...], "bwd_s": [...]}, "2": {...}}, ...}}
//
// Bytes are per sample. `devices` maps a device type of the cluster to per-microbatch-
// size lists (tp = 1); a stage with dp replicas uses the entry for microbatch_size / dp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/planner/stage_costs.h"

namespace harp::planner {

struct CostTable {
  int microbatch_size = 1;
  std::vector<std::string> layer_names;
  std::vector<StageCosts::LayerBytes> layers;
  std::map<std::string, std::map<int, StageCosts::LayerTimes>> times;  // device -> samples
};

StatusOr<CostTable> parse_cost_table(const Json& node, const std::string& file);
StatusOr<CostTable> load_cost_table(const std::string& file);

// Checks the table against a cluster: every device type of the cluster has an entry for
// the full microbatch (dp = 1), and every device named in the table is in the cluster.
Status check_cost_table(const CostTable& table, const cluster::Cluster& cluster,
                        const std::string& file);

}  // namespace harp::planner
