// The launchers of several machines agree on who runs which ranks before any worker
// starts (harp launch --nnodes): each machine may run a different number of workers, as
// torchrun's --nproc-per-node may differ per node. Node 0's launcher listens at
// MASTER_ADDR:MASTER_PORT; every other launcher connects and says its node rank and
// worker count; node 0 answers each with its first global rank and the world size, in
// node-rank order (node 0's workers are ranks 0..n0-1, node 1's the next n1, ...), and
// closes the port before anyone starts a worker, so rank 0's store can take it.
//
// The protocol is one line each way:
//   launcher -> node 0: "harp-launch 1 TOKEN NNODES NODE_RANK NPROC\n"
//   node 0 -> launcher: "ok FIRST_RANK WORLD_SIZE N0,N1,...\n" or "error MESSAGE\n"
// TOKEN is "-", or the SHA-256 of HARP_RENDEZVOUS_SECRET when set (required unless the
// address is loopback): a connection with another token, or with a malformed line, is
// dropped and the wait goes on; launchers that disagree (the number of machines, a node
// rank given twice or out of range) stop every launcher with one line naming them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harp/common/status.h"

namespace harp::launch {

struct NodeMeeting {
  std::string master_addr;  // node 0's address (a name or a number)
  int master_port = 0;
  int nnodes = 1, node_rank = 0;
  int nproc = 1;            // this machine's workers
  std::string secret;       // HARP_RENDEZVOUS_SECRET; "" on loopback
  double timeout_s = 600;   // for every machine to arrive
  // A line now and then while waiting (who is missing); may be null.
  std::function<void(const std::string&)> progress;
  double progress_every_s = 30;
};

struct NodeRanks {
  int first_rank = 0;       // this machine's first global rank
  int world_size = 0;       // every machine's workers
  std::vector<int> nprocs;  // by node rank
};

// Meets the other machines' launchers; with nnodes == 1, answers at once.
StatusOr<NodeRanks> meet_nodes(const NodeMeeting& m);

// The first global rank of each node from the worker counts by node rank.
std::vector<int> first_ranks(const std::vector<int>& nprocs);

}  // namespace harp::launch
