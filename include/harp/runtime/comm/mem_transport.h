// An in-memory transport for thread ranks in one process (tests): point-to-point
// mailboxes per (sender, receiver, tag) and rendezvous all-reduces, with the same
// bounded waits and messages as the c10d transport. It injects faults at a chosen rank,
// step and action, so failure handling is tested in-process in milliseconds:
//   kKill   the rank dies before the action (its thread gets RankKilled; peers waiting
//           on it fail at once, as when a process exits and its sockets close);
//   kStall  the rank hangs before the action until every other rank has finished
//           (peers must time out);
//   kDelay  the rank sleeps delay_s before the action, then goes on;
//   kDrop   the rank's sends at that action are lost (the receiver times out).
// By default sends are buffered (they complete at once), so it models asynchronous sends;
// the strict rendezvous rule is the validator's job (schedule/validate.h). A transit
// function (set_transit) makes a point-to-point message arrive that many seconds after it
// was sent: a link that is slow, or slows down mid-run.
//
// Rules::kNccl keeps NCCL's rules on a GPU instead, so that what only a GPU would show
// (a deadlock between a device-wide synchronisation and posted receives) fails a CPU test:
//   - messages between two ranks match in the order posted, per direction; tags are not
//     used to match (NCCL has none), only checked: a receive whose message was sent with
//     another tag fails, naming both (on a GPU it would take the wrong data);
//   - a send completes only once its receive is posted (NCCL's rendezvous);
//   - a posted receive is device work until its data has arrived, and a posted send until
//     its receive is posted: Transport::synchronize_device (what cudaDeviceSynchronize
//     does to NCCL's streams) waits for all of them, and fails after the timeout naming
//     what it waited for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harp/runtime/comm/transport.h"

namespace harp::runtime {

struct Fault {
  enum class Kind { kKill, kStall, kDelay, kDrop };
  Kind kind = Kind::kKill;
  int rank = 0;
  int step = 0;
  schedule::Action action;  // fires before this action of `step` on `rank`
  double delay_s = 0;       // kDelay only
};

// What the rank that a kKill fault hits sees.
class RankKilled : public RuntimeFailure {
 public:
  using RuntimeFailure::RuntimeFailure;
};

class MemNetwork {
 public:
  enum class Rules { kBuffered, kNccl };
  explicit MemNetwork(int world_size, std::vector<Fault> faults = {}, Rules rules = Rules::kBuffered);
  MemNetwork(const MemNetwork&) = delete;
  MemNetwork& operator=(const MemNetwork&) = delete;

  // This rank's transport. REQUIRES: the network outlives it; one per rank.
  std::unique_ptr<Transport> connect(const RankLayout& layout, std::chrono::milliseconds timeout);

  // Seconds a message from `sender` to `receiver` sent during `step` spends on its way (0:
  // none). Set before the ranks connect.
  using TransitFn = std::function<double(int sender, int receiver, int step)>;
  void set_transit(TransitFn transit) { transit_ = std::move(transit); }

 private:
  friend class MemTransport;
  struct Collective {
    std::map<int, torch::Tensor> parts;  // member index -> contribution
    torch::Tensor sum;
    int taken = 0;
  };
  using MailKey = std::tuple<int, int, int>;  // sender, receiver, tag
  struct Mail {
    torch::Tensor tensor;
    std::chrono::steady_clock::time_point arrives;
    int tag = 0;
  };
  // Rules::kNccl: one direction between two ranks. Send i and receive i match.
  struct Link {
    std::map<std::int64_t, Mail> sent;         // by send index, until its receive takes it
    std::int64_t sends = 0, receives = 0;      // posted so far
    std::map<std::int64_t, int> receive_tags;  // by receive index, until it takes its message
  };

  int world_size_;
  std::vector<Fault> faults_;
  Rules rules_;
  std::map<std::pair<int, int>, Link> links_;  // (sender, receiver), Rules::kNccl
  TransitFn transit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<MailKey, std::vector<Mail>> mail_;           // FIFO per key
  std::map<std::string, Collective> collectives_;       // "<group>#<sequence>"
  std::map<int, std::string> gone_;                     // rank -> why it is gone
  int finished_ = 0;                                    // transports destroyed
};

}  // namespace harp::runtime
