// Ranks placed on the emulated cluster (see launch_ranks.h).
#include "harp/testbed/launch_ranks.h"

#include "harp/launch/worker_env.h"

namespace harp::testbed {

StatusOr<std::vector<int>> rank_devices(const cluster::Cluster& c, const plan::Plan* plan,
                                        const std::string& plan_file, const std::string& cluster_file, int* nproc) {
  std::vector<int> devices;
  if (plan != nullptr) {
    if (!plan->cluster_fingerprint.empty() && plan->cluster_fingerprint != c.fingerprint())
      return invalid_argument(plan_file + ": the plan was made for another cluster (fingerprint " +
                              plan->cluster_fingerprint + ", " + cluster_file + " has " + c.fingerprint() +
                              "); plan again with this cluster file");
    devices = plan->used_devices();
    if (*nproc == 0) *nproc = static_cast<int>(devices.size());
    if (*nproc != static_cast<int>(devices.size()))
      return invalid_argument("--nproc " + std::to_string(*nproc) + ": the plan " + plan_file + " runs " +
                              std::to_string(devices.size()) + " ranks; leave --nproc out or set it to that");
  } else {
    if (*nproc == 0) return invalid_argument("--nproc: give the number of ranks (or --plan to take it from a plan)");
    if (*nproc > c.num_devices())
      return invalid_argument("--nproc " + std::to_string(*nproc) + ": the cluster " + cluster_file + " has " +
                              std::to_string(c.num_devices()) + " devices");
    for (int r = 0; r < *nproc; ++r) devices.push_back(r);
  }
  for (int d : devices)
    if (d < 0 || d >= c.num_devices())
      return invalid_argument(plan_file + ": device " + std::to_string(d) + " is not in the cluster " + cluster_file);
  return devices;
}

StatusOr<RankPlacement> place_ranks(const cluster::Cluster& c, const Topology& t, const std::vector<int>& devices,
                                    launch::LaunchOptions* options) {
  RankPlacement out;
  out.prefix = t.prefix;
  if (Status s = available(); !s.ok()) {
    out.unavailable = s.message();
    return out;
  }
  out.testbed = true;
  HARP_ASSIGN_OR_RETURN(out.brought_up, ensure_up(c, t));
  for (int r = 0; r < options->nproc; ++r) {
    const Host& host = t.hosts[t.host_of_device(devices[r])];
    options->rank_prefix.push_back({"ip", "netns", "exec", host.netns});
    launch::WorkerEnv vars;  // Gloo binds this host's address; the trainer names the testbed
    vars.gloo_addr = host.address;
    vars.testbed = t.prefix;
    options->rank_env.push_back(vars.harp_env());
    out.map += (r ? ", " : "") + std::to_string(r) + "->" + c.subclusters[host.subcluster].name + "@" + host.address;
  }
  return out;
}

}  // namespace harp::testbed
