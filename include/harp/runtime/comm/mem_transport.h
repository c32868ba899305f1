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
// Sends are buffered (they complete at once), so it models asynchronous sends; the
// strict rendezvous rule is the validator's job (schedule/validate.h). A transit function
// (set_transit) makes a point-to-point message arrive that many seconds after it was sent:
// a link that is slow, or slows down mid-run.
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
  explicit MemNetwork(int world_size, std::vector<Fault> faults = {});
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
  };

  int world_size_;
  std::vector<Fault> faults_;
  TransitFn transit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<MailKey, std::vector<Mail>> mail_;           // FIFO per key
  std::map<std::string, Collective> collectives_;       // "<group>#<sequence>"
  std::map<int, std::string> gone_;                     // rank -> why it is gone
  int finished_ = 0;                                    // transports destroyed
};

}  // namespace harp::runtime
