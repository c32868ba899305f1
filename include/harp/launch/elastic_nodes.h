// Elastic training across machines (elastic.h): which devices each machine
// hosts as devices leave, and the launchers' exchange of what each one lost.
#pragma once

#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/status.h"
#include "harp/launch/clock.h"

namespace harp::launch {

class MachineDevices {
 public:
  // With n = the cluster's nodes: machine m hosts node m's devices (nodes may differ in
  // size). Otherwise machine m of n hosts devices [m D / n, (m + 1) D / n) of c (D = c's
  // devices), which n must divide.
  static StatusOr<MachineDevices> split(const cluster::Cluster& c, int machines);
  bool hosts(int machine, int device) const;
  const std::vector<int>& of(int machine) const { return devices_[static_cast<size_t>(machine)]; }
  // Device d of `before` left (cluster::without_device): it goes, the others' ids follow.
  void remove(const cluster::Cluster& before, int d);

 private:
  std::vector<std::vector<int>> devices_;
};

struct MachineReport {
  bool heard = false;      // its file came within the wait
  std::vector<int> lost;   // device ids it lost (died by a signal or stalled)
  int exit_code = 0;       // its launch's
};

// Writes this machine's report of `attempt` to DIR/attempt_K/node_R.json, then waits up
// to `wait_s` for those of the machines `waited` marks (the ones that ran workers); one
// not heard from is reported as such (its launcher
// is gone: the caller drops its devices). Files older than this launcher's start
// (`started_unix`, seconds) are left over from an earlier run in the same folder and
// are not read. The wait and the report's time are `clock`'s.
StatusOr<std::vector<MachineReport>> exchange_reports(const std::string& dir, int attempt, int node_rank,
                                                      const std::vector<bool>& waited, const MachineReport& mine,
                                                      double wait_s, double started_unix, Clock& clock);

}  // namespace harp::launch
