// Elastic training (`harp launch --elastic`): plan, launch one worker per planned device,
// and when ranks are lost drop their devices and plan again over the survivors, resuming
// from the last complete checkpoint. Lost ranks are the ones that died by a signal before
// the launcher stopped anyone, or that ignored its SIGTERM (stalled): their devices leave
// the cluster (cluster::without_device). A run stopped on request (SIGUSR1 to the
// launcher: the workers stop after their next checkpoint) re-reads the cluster, taking
// every device it lists as available, and plans over it (re-admission).
//
// Re-planning on drift (replan_min_gain > 0): while a run trains, the controller reads the
// drifts rank 0 records (runtime/io/drift.h), sets each subcluster's compute to what the
// run measures there now (cost::CostConfig::compute_drift: measured over the planner's
// costs) and each link between subclusters to the transit the run measures on it
// (drifted_cluster: its bandwidth scaled), plans again over them, and adopts the new plan at the next checkpoint (a stop
// request, then a restart with --resume) only when it is predicted at least
// replan_min_gain faster over the steps left, counting the restart (as this attempt's
// took); the decision is logged and recorded in OUT/elastic/recoveries.jsonl either way.
// A drift that ends is one the other way: the factors go back and so may the plan.
//
// The controller is given the planner, the cluster's reader, the launcher and the clock,
// so it is tested with fakes of all four (tests/launch/elastic_controller_test.cc).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/common/status.h"
#include "harp/launch/clock.h"
#include "harp/launch/launcher.h"
#include "harp/plan/plan.h"

namespace harp::launch {

struct ElasticOptions {
  std::string job_file;               // handed to the workers as --job (unless the command has one)
  std::string out_dir;                // the run folder (checkpoints, metrics.jsonl, elastic/),
                                      // unless the worker command has --out
  int max_restarts = 3;               // after lost ranks; re-admissions are not counted
  double grace_s = 5.0;               // SIGTERM -> SIGKILL
  double report_wait_s = 30.0;        // across machines: how long to wait for the others' reports
  bool emulate = false;               // the workers apply the plan's emulated slowdowns
  std::vector<std::string> command;   // the worker: `harp train [flags]`, without --plan
  // Across machines (one launcher on each, OUT on a shared file system): machine R of
  // nnodes hosts the cluster's devices [R D / nnodes, (R + 1) D / nnodes); rank 0's
  // machine (node_rank 0) hosts the rendezvous at master_addr, on master_port + attempt.
  int nnodes = 1, node_rank = 0, master_port = 29500;
  std::string master_addr = "127.0.0.1";
  // Re-planning on drift (one machine): > 0 adopts a plan predicted at least this
  // fraction faster; 0: off. The workers' settings it reads: their drift detection's
  // threshold (which must be on) and window (the steps whose median is the drifted step
  // time), the run's steps and checkpoint interval (the steps left after the stop).
  double replan_min_gain = 0;
  double drift_threshold = 0;
  int drift_window = 5;
  int steps = 0, checkpoint_every = 0;
  double poll_s = 1.0;  // how often metrics.jsonl is read for drifts
  // With re-planning: the workers probe the links their plan does not cross every this
  // many steps (harp train --link-probe-every; 0: not), so a link a plan routes around is
  // still measured and its recovery seen.
  int link_probe_every = 0;
  // One machine: places each attempt's ranks (`harp launch --elastic --testbed`: each in
  // its device's namespace); `devices` are rank r's device ids in the cluster the
  // controller was given (ids stay those of the first cluster after devices are lost).
  // Returns a line for the log. Null: ranks on 127.0.0.1.
  std::function<StatusOr<std::string>(const std::vector<int>& devices, LaunchOptions* options)> place;
};

// Per subcluster name: the factor on its compute times that a run measured (1 if absent).
using ComputeDrift = std::map<std::string, double>;
// Per pair of subcluster names (sorted): the factor on the bandwidth term of a transfer
// between them that a run measured (1 if absent).
using LinkDrift = std::map<std::pair<std::string, std::string>, double>;
// `c` with the bandwidth of the link between each pair in `drift` divided by its factor
// (a pair without a declared link gets one: its chain's, path_link, so divided).
cluster::Cluster drifted_cluster(const cluster::Cluster& c, const LinkDrift& drift);

// The planner's answer for a cluster: a plan, or why none fits.
struct PlanAttempt {
  bool feasible = false;
  std::string reason;  // when not feasible
  plan::Plan plan;
};
// The planner over a cluster whose subclusters compute `drift` x their costs.
using PlanFn = std::function<StatusOr<PlanAttempt>(const cluster::Cluster&, const ComputeDrift& drift)>;
// The cluster as its file says now (re-admission).
using ClusterFn = std::function<StatusOr<cluster::Cluster>()>;

// What starts the workers: launch() in a run, a fake in tests.
class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual StatusOr<LaunchResult> run(const LaunchOptions& options, std::ostream& out) = 0;
  static Launcher& local();  // launch(), on this machine
};

// The value after `flag` in a worker command, or "".
std::string flag_value(const std::vector<std::string>& command, const std::string& flag);

class ElasticController {
 public:
  ElasticController(ElasticOptions options, cluster::Cluster cluster, PlanFn plan, ClusterFn reread,
                    Launcher& launcher, Clock& clock);

  // Runs to the end. Logs each plan and recovery on `err` ("harp launch --elastic: ...";
  // time to stop, to re-plan, to the first step after the restart, steps lost) and in
  // OUT/elastic/recoveries.jsonl; the workers' lines go to `out`. Returns the exit code
  // (docs/errors.md): 0 when the run ends, 3 when no plan fits the devices left, 2 for a
  // worker command that sets what the controller owns (--plan, --resume, --nnodes), 1
  // for bad input or I/O, else the last launch's. Across machines the launchers tell
  // each other their lost devices through OUT/elastic/ (elastic_nodes.h) and each
  // re-plans the same (the planner is deterministic).
  int run(std::ostream& out, std::ostream& err);

 private:
  ElasticOptions o_;
  cluster::Cluster cluster_;
  PlanFn plan_;
  ClusterFn reread_;
  Launcher& launcher_;
  Clock& clock_;
};

}  // namespace harp::launch
