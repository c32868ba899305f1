// `harp launch --testbed`: each rank starts inside the namespace of its device's host and
// binds Gloo to that host's address, so its messages cross the shaped links.
#pragma once

#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/status.h"
#include "harp/launch/launcher.h"
#include "harp/plan/plan.h"
#include "harp/testbed/testbed.h"

namespace harp::testbed {

// The devices the ranks run: the plan's, in increasing id (the runtime's rank layout),
// or rank r on device r without a plan. `*nproc` 0 takes the plan's count. The messages
// name `plan_file` and `cluster_file`.
StatusOr<std::vector<int>> rank_devices(const cluster::Cluster& cluster, const plan::Plan* plan,
                                        const std::string& plan_file, const std::string& cluster_file, int* nproc);

struct RankPlacement {
  bool testbed = false;     // false: no testbed here (`unavailable` says why); ranks on 127.0.0.1
  std::string unavailable;
  bool brought_up = false;  // this launch brought it up (take it down after)
  std::string prefix;
  std::string map;          // "0->pool-a@10.99.0.1, 1->..."
};

// Fills options->nproc, rank_prefix and rank_env for `devices`, bringing the testbed of
// `topology` up unless it is.
StatusOr<RankPlacement> place_ranks(const cluster::Cluster& cluster, const Topology& topology,
                                    const std::vector<int>& devices, launch::LaunchOptions* options);

}  // namespace harp::testbed
