// The local launcher behind `harp launch` (torch-free): starts N worker processes with
// the torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT on a free port of 127.0.0.1, and HARP_CLOCK_ORIGIN_NS: the launch's start
// on CLOCK_MONOTONIC, which every process of this machine shares, so the ranks' traces
// line up on one clock), forwards their output line by line with a
// "[rank r] " prefix, and when one worker fails (non-zero exit or killed) stops all the
// others (SIGTERM, then SIGKILL after a grace period).
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/launch/clock.h"

namespace harp::launch {

struct LaunchOptions {
  int nproc = 1;                           // workers on this machine
  // Several machines (torchrun's convention): this launcher's workers are global ranks
  // node_rank * nproc + local rank of nnodes * nproc, meeting at rank 0's TCPStore at
  // master_addr:master_port (every node gives the same). One node: a private file store
  // and a free port of 127.0.0.1, as below.
  int nnodes = 1, node_rank = 0;
  std::string master_addr;                 // "" with one node
  int master_port = 0;
  bool multi_node() const { return nnodes > 1 || !master_addr.empty(); }
  std::vector<std::string> command;        // argv of each worker; [0] searched in PATH
  std::map<std::string, std::string> env;  // extra variables for every worker; they override
                                           // the inherited environment, the torchrun
                                           // variables above override both
  double grace_s = 5.0;                    // SIGTERM -> SIGKILL
  // Per rank (empty, or one entry per rank): words put before the command, e.g.
  // {"ip", "netns", "exec", NS} to start the rank inside a namespace, and variables that
  // override `env` for that rank.
  std::vector<std::vector<std::string>> rank_prefix;
  std::vector<std::map<std::string, std::string>> rank_env;
  // Elastic restarts across machines (harp launch --elastic --nnodes): the global rank of
  // each local worker (one per worker) and the world size, instead of node_rank * nproc
  // + local of nnodes * nproc; and which local worker hosts the TCPStore at master_addr
  // (HARP_STORE_SERVER=1; every other worker, on every machine, connects to it):
  // kRankZeroHosts, a local index, or kElsewhere (a worker of another machine).
  static constexpr int kRankZeroHosts = -1, kElsewhere = -2;
  std::vector<int> ranks;
  int world_size = 0;
  int store_host = kRankZeroHosts;
  int global_rank(int local) const { return ranks.empty() ? node_rank * nproc + local : ranks[local]; }
  bool forward_usr1 = true;  // false: SIGUSR1 to the launcher is ignored
  // Asked at every poll (20 ms) while the workers run; the first time it answers true,
  // every worker gets SIGUSR1 as if the launcher had (harp train stops after its next
  // checkpoint): elastic re-planning on drift stops a run this way. Null: never.
  std::function<bool()> stop_when;
  // The clock of the grace period and the reported stop times; null: Clock::system().
  // (The poll loop still waits on the workers' pipes in real time, 20 ms at a time.)
  Clock* clock = nullptr;
};

struct LaunchResult {
  int exit_code = 0;   // 0 if every worker succeeded, else the first failure's code
                       // (128 + signal for a signal)
  int failed_rank = -1;
  std::string summary;  // one line: who failed and how, or "all N workers exited 0"
  // The ranks that died by a signal before the launcher stopped anyone (killed from
  // outside, or crashed), then those that ignored its SIGTERM for the grace period
  // (stalled): the ones elastic training drops.
  std::vector<int> lost_ranks;
  double stop_s = 0;    // from the first failure seen to every worker gone
  double forwarded_s = -1;  // from the first SIGUSR1 passed on to every worker gone; -1: none
};

// Finds a free TCP port on 127.0.0.1. The port is free when returned; another process
// may take it before a worker binds it (the same race torchrun accepts).
StatusOr<int> free_port();

// Runs the workers to completion. `out` receives the prefixed lines of every worker's
// stdout and stderr, in arrival order. Returns an error only if workers could not start
// (bad options, no pipes, fork failed); a command that cannot be executed is a worker
// failing with exit code 127. Each worker runs in its own process group, so stopping it
// also stops its children. While it runs, SIGINT, SIGTERM and SIGHUP to this process
// stop the workers (exit code 128 + signal, failed_rank -1) unless the caller ignores
// that signal, and SIGUSR1 is passed on to every worker's process group (harp train
// stops after its next checkpoint); the previous handlers are restored on return. Not thread-safe: call from one thread at a time.
StatusOr<LaunchResult> launch(const LaunchOptions& options, std::ostream& out);

}  // namespace harp::launch
