// `harp launch --elastic` (cmd_launch_elastic.cc): the launcher that re-plans when a
// device is lost.
#pragma once

#include <string>
#include <vector>

#include "commands.h"

namespace harp::cli {

struct ElasticOptions {
  std::string job_file;               // cluster, model, planner options, training section
  int max_restarts = 3;
  double grace_s = 5.0;
  bool emulate = false;
  std::vector<std::string> command;   // the worker: `harp train [flags]`, without --plan
  // Across machines (one launcher on each, OUT on a shared file system): machine R of
  // nnodes hosts the cluster's devices [R D / nnodes, (R + 1) D / nnodes); rank 0's
  // machine (node_rank 0) hosts the rendezvous at master_addr, on master_port + attempt.
  int nnodes = 1, node_rank = 0, master_port = 29500;
  std::string master_addr = "127.0.0.1";
};

// Plans the job, runs one worker per planned device with `--job JOB --plan PLAN`, and
// when ranks are lost drops their devices from the cluster, re-plans over the survivors
// with the job's planner options and restarts from the last complete checkpoint
// (`--resume`). Logs each recovery (time to stop, to re-plan, to the first step after
// the restart; steps lost) on stderr and in OUT/elastic/recoveries.jsonl. Returns the
// last launch's exit code, or 3 when no plan fits the devices left. Across machines the
// launchers tell each other their lost devices through OUT/elastic/ (elastic_nodes.h)
// and each re-plans the same (the planner is deterministic).
int run_elastic(const ElasticOptions& options, Context& ctx);

}  // namespace harp::cli
