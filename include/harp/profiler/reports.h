// What `harp profile check` and `harp profile links` print: a plan's stages measured here
// against their prediction, and the links measured here as cluster-file entries.
#pragma once

#include <ostream>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/plan/plan.h"
#include "harp/profiler/profiler.h"

namespace harp::profiler {

// The table of stages (predicted and measured forward + backward, error, spread) and the
// median and largest |error|. REQUIRES: checks non-empty.
void write_stage_checks(const plan::Plan& plan, const std::vector<StageCheck>& checks, std::ostream& out);

// The message sizes `harp profile links` times: 4 KiB to 16 MiB, and what the runtime
// sends across each cut of `plan` (float32 elements of its cut shape), if given.
std::vector<double> link_sizes(const plan::Plan* plan);

// The times per size, the fitted latency and bandwidth, and the cluster-file entries
// (for `cluster`'s subclusters and links when given, else a template).
void write_link_report(const std::vector<double>& sizes, const LinkReport& report, const cluster::Cluster* cluster,
                       std::ostream& out);

}  // namespace harp::profiler
