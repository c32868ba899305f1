// Reading and validating cluster specs (YAML or JSON; format in docs/file_formats.md).
#pragma once

#include <string>

#include "harp/cluster/cluster.h"
#include "harp/common/document.h"
#include "harp/common/status.h"

namespace harp::cluster {

// Parses and validates a cluster from a JSON tree. `file` and `path` locate it in
// messages (a cluster inline in a job file has path "cluster").
StatusOr<Cluster> parse_cluster(const Json& node, const std::string& file,
                                const std::string& path = "");

// Loads a cluster file.
StatusOr<Cluster> load_cluster(const std::string& file);

Json cluster_to_json(const Cluster& cluster);

}  // namespace harp::cluster
