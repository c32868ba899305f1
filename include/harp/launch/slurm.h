// `harp launch --slurm`: one launcher per node of a SLURM allocation (`srun
// --ntasks-per-node=1 harp launch --slurm ...`), its machines, node rank and node 0's
// address read from the variables srun sets, as Lightning and submitit read them.
#pragma once

#include <functional>
#include <string>

#include "harp/common/status.h"

namespace harp::launch {

struct SlurmNode {
  int nnodes = 1;            // SLURM_NNODES (or SLURM_JOB_NUM_NODES)
  int node_rank = 0;         // SLURM_NODEID
  std::string master_addr;   // the first host of SLURM_JOB_NODELIST (or SLURM_NODELIST)
  int gpus_on_node = 0;      // SLURM_GPUS_ON_NODE; 0 when unset
};

// From a lookup (name -> value, or nullptr when unset); an error names the variable
// missing or malformed and how to run under SLURM.
StatusOr<SlurmNode> slurm_node(const std::function<const char*(const char*)>& lookup);

// The first host of a SLURM host list: "gpu[07-09,12],cpu1" -> "gpu07",
// "rack[1-2]-n[01-04]" -> "rack1-n01", "a100-3" -> "a100-3". Empty when malformed.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace harp::launch
