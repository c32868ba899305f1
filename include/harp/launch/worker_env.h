// The contract between a launcher and its workers: every environment variable one hands
// the other, torchrun's and HARP's own, named in one place (worker_env.cc). `harp launch`
// writes them with to_env(); `harp train` and the runtime's rendezvous read them with
// from_env(). No other file spells a HARP_* variable.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "harp/common/status.h"

namespace harp::launch {

struct WorkerEnv {
  // torchrun's (https://pytorch.org/docs/stable/elastic/run.html): always written.
  int rank = 0;                          // RANK
  int world_size = 1;                    // WORLD_SIZE
  int local_rank = 0;                    // LOCAL_RANK: the rank's CUDA device
  int local_world_size = 1;              // LOCAL_WORLD_SIZE
  int group_rank = 0;                    // GROUP_RANK: the machine's rank
  int group_world_size = 1;              // GROUP_WORLD_SIZE: the machines taking part
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  std::string master_port = "29500";      // MASTER_PORT, as text: the rendezvous checks it
  // torchrun's, read only (a torchrun agent sets them): the attempt, which prefixes the
  // store's keys, and whether the agent hosts the store.
  int restart_count = 0;                 // TORCHELASTIC_RESTART_COUNT
  bool agent_store = false;              // TORCHELASTIC_USE_AGENT_STORE=True
  std::string gloo_ifname;               // GLOO_SOCKET_IFNAME: Gloo's interface across machines

  // HARP's: written only when set (empty, 0 or false: left as inherited).
  std::string store_file;         // HARP_STORE_FILE: one machine's rendezvous file
  std::string store_server;       // HARP_STORE_SERVER: "1" this rank hosts the TCPStore, "0" not
  long long clock_origin_ns = 0;  // HARP_CLOCK_ORIGIN_NS: the launch's start, CLOCK_MONOTONIC
  bool emulate = false;           // HARP_EMULATE=1: apply the plan's emulated slowdowns
  std::string testbed;            // HARP_TESTBED: the emulated cluster's namespace prefix
  std::string gloo_addr;          // HARP_GLOO_ADDR: the address Gloo binds (a testbed host)
  std::string rendezvous_secret;  // HARP_RENDEZVOUS_SECRET: the store's key prefix across machines

  // torchrun's variables (RANK .. MASTER_PORT) and HARP's that are set.
  std::map<std::string, std::string> to_env() const;
  // HARP's that are set, alone: what a caller adds to a launch for every worker or one.
  std::map<std::string, std::string> harp_env() const;
  // From this process's environment; an unset or empty variable keeps the default above.
  // A number is read whole and range-checked (common/parse.h): RANK=abc, RANK=0.9,
  // RANK=4294967296 or WORLD_SIZE=1x is an error naming the variable, its value and the
  // rule, as is a RANK outside [0, WORLD_SIZE), a LOCAL_RANK outside [0,
  // LOCAL_WORLD_SIZE) or a MASTER_PORT outside 1..65535.
  static StatusOr<WorkerEnv> from_env();
  // The same from any lookup (tests): name -> value, or nullptr when unset.
  static StatusOr<WorkerEnv> from(const std::function<const char*(const char*)>& lookup);
};

// HARP_RENDEZVOUS_SECRET of this process's environment ("" when unset): what a launcher
// meeting others across machines (node_rendezvous.h) proves itself with.
std::string rendezvous_secret_from_env();
// Whether MASTER_ADDR names this machine's loopback (no secret needed there).
bool is_loopback_address(const std::string& addr);

// The file through which `harp testbed set --device-slowdown` slows the devices of one
// subcluster of a running testbed: /tmp/harp-testbed-<prefix>/slowdown-<subcluster>, holding
// the factor as text. A rank of a run on the testbed (HARP_TESTBED) reads it before every
// step and makes its compute that much slower, on top of any emulation; no file: 1.
std::string testbed_slowdown_dir(const std::string& prefix);
std::string testbed_slowdown_file(const std::string& prefix, const std::string& subcluster);

}  // namespace harp::launch
