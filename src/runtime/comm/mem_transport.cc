// The in-memory transport (see mem_transport.h). One mutex and one condition variable
// for the whole network: tests run a handful of ranks, and simplicity beats throughput.
#include "harp/runtime/comm/mem_transport.h"

#include <thread>

namespace harp::runtime {

class MemTransport : public Transport {
 public:
  MemTransport(MemNetwork& net, RankLayout layout, std::chrono::milliseconds timeout)
      : Transport(std::move(layout), timeout), net_(net) {}

  ~MemTransport() override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    net_.gone_.emplace(layout().rank, "closed its connection");
    ++net_.finished_;
    net_.cv_.notify_all();
  }

  Transfer isend(torch::Tensor& t, int peer, int tag, const std::string& what) override {
    check_open();
    const double transit = net_.transit_ ? net_.transit_(layout().rank, peer, step_) : 0.0;
    const auto arrives = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(transit));
    std::lock_guard<std::mutex> lock(net_.mu_);
    std::shared_ptr<Transfer::Op> op = std::make_shared<Done>();
    if (net_.rules_ == MemNetwork::Rules::kNccl) {
      MemNetwork::Link& link = net_.links_[{layout().rank, peer}];
      const std::int64_t index = link.sends++;
      if (!dropping_) link.sent[index] = {t.clone(), arrives, tag};
      op = std::make_shared<NcclSend>(*this, peer, index);
    } else if (!dropping_) {
      net_.mail_[{layout().rank, peer, tag}].push_back({t.clone(), arrives, tag});
    }
    net_.cv_.notify_all();
    return Transfer(op, what, peer);
  }

  Transfer irecv(torch::Tensor& t, int peer, int tag, const std::string& what) override {
    check_open();
    if (net_.rules_ != MemNetwork::Rules::kNccl)
      return Transfer(std::make_shared<Recv>(*this, t, peer, tag), what, peer);
    std::lock_guard<std::mutex> lock(net_.mu_);
    MemNetwork::Link& link = net_.links_[{peer, layout().rank}];
    const std::int64_t index = link.receives++;
    link.receive_tags[index] = tag;
    net_.cv_.notify_all();  // a send waiting for its receive
    return Transfer(std::make_shared<NcclRecv>(*this, t, peer, tag, index), what, peer);
  }

  void synchronize_device(const std::string& what) override {
    check_open();
    if (net_.rules_ != MemNetwork::Rules::kNccl) return;
    std::unique_lock<std::mutex> lock(net_.mu_);
    const int me = layout().rank;
    std::string waiting;  // what the synchronisation waits for, once it cannot go on
    auto done = [&] {
      for (const auto& [ends, link] : net_.links_) {
        if (ends.second == me)
          for (const auto& [index, tag] : link.receive_tags)
            if (!link.sent.count(index)) {
              waiting = "the receive of tag " + std::to_string(tag) + " from rank " + std::to_string(ends.first) +
                        ", posted before it, whose message has not been sent";
              return net_.gone_.count(ends.first) > 0;
            }
        if (ends.first == me && link.receives < link.sends) {
          waiting = "a send to rank " + std::to_string(ends.second) + " whose receive has not been posted";
          return net_.gone_.count(ends.second) > 0;
        }
      }
      waiting.clear();
      return true;
    };
    if (!net_.cv_.wait_until(lock, std::chrono::steady_clock::now() + timeout(), done))
      throw RuntimeFailure(what + ": a device-wide synchronisation waits for every transfer NCCL has posted, and " +
                           "still waits for " + waiting + " after " + std::to_string(timeout().count()) +
                           " ms: on a GPU the ranks deadlock here");
    if (!waiting.empty())
      throw RuntimeFailure(what + ": the device-wide synchronisation waits for " + waiting + ", and that rank is gone");
  }

  void allreduce_dp(torch::Tensor& t, const std::string& what) override {
    if (layout().dp() == 1) return check_open();
    allreduce("dp" + std::to_string(layout().stage) + "." + std::to_string(layout().tp_rank), layout().dp_group(), t,
              what + " (data-parallel group of stage " + std::to_string(layout().stage) + ")");
  }
  void allreduce_tp(torch::Tensor& t, const std::string& what) override {
    if (layout().tp() == 1) return check_open();
    allreduce("tp" + std::to_string(layout().stage) + "." + std::to_string(layout().dp_rank), layout().tp_group(), t,
              what + " (tensor-parallel group of stage " + std::to_string(layout().stage) + ")");
  }
  void allreduce_tied(torch::Tensor& t, const std::string& what) override {
    allreduce("tied", tied_group_members(layout()), t, what + " (tied-embedding group)");
  }
  void allreduce_world(torch::Tensor& t, const std::string& what) override {
    allreduce("world", all_ranks(), t, what + " (all ranks)");
  }
  void barrier(const std::string& what) override {
    torch::Tensor none = torch::zeros({1});
    allreduce("world", all_ranks(), none, what + " (all ranks)");
  }

  double round_trip(int peer, std::int64_t bytes, bool initiator, const std::string& what) override {
    torch::Tensor t = torch::zeros({std::max<std::int64_t>(1, bytes / 4)}, torch::kFloat32);
    const auto start = std::chrono::steady_clock::now();
    const std::string to = what + " (link probe) to rank", from = what + " (link probe) from rank";
    if (initiator) isend(t, peer, kProbeTag, to).wait(timeout());
    irecv(t, peer, kProbeTag, from).wait(timeout());
    if (!initiator) isend(t, peer, kProbeTag, to).wait(timeout());
    return initiator ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() : 0.0;
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    if (aborted_.empty()) aborted_ = reason.empty() ? "aborted" : reason;
    net_.gone_.emplace(layout().rank, "aborted (" + aborted_ + ")");
    net_.cv_.notify_all();
  }

  void before_action(int step, const schedule::Action& action) override {
    dropping_ = false;
    step_ = step;
    for (const Fault& f : net_.faults_) {
      if (f.rank != layout().rank || f.step != step || !(f.action == action)) continue;
      const std::string where = "at step " + std::to_string(step) + " before " + schedule::to_string(action);
      switch (f.kind) {
        case Fault::Kind::kKill: {
          std::lock_guard<std::mutex> lock(net_.mu_);
          net_.gone_.emplace(layout().rank, "died");
          net_.cv_.notify_all();
          aborted_ = "killed " + where;
          throw RankKilled("rank " + std::to_string(layout().rank) + " killed (injected) " + where);
        }
        case Fault::Kind::kStall: {
          // Hang until everyone else has given up; then leave without a word.
          std::unique_lock<std::mutex> lock(net_.mu_);
          net_.cv_.wait(lock, [&] { return net_.finished_ >= net_.world_size_ - 1; });
          aborted_ = "stalled " + where;
          throw RankKilled("rank " + std::to_string(layout().rank) + " stalled (injected) " + where);
        }
        case Fault::Kind::kDelay:
          std::this_thread::sleep_for(std::chrono::duration<double>(f.delay_s));
          break;
        case Fault::Kind::kDrop:
          dropping_ = true;
          break;
      }
    }
  }

 private:
  struct Done : Transfer::Op {
    void wait(std::chrono::milliseconds) override {}
    bool done() override { return true; }
  };
  struct Recv : Transfer::Op {
    Recv(MemTransport& self, torch::Tensor t, int peer, int tag) : self_(self), t_(std::move(t)), peer_(peer), tag_(tag) {}
    void wait(std::chrono::milliseconds timeout) override {
      MemNetwork& net = self_.net_;
      std::unique_lock<std::mutex> lock(net.mu_);
      const MemNetwork::MailKey key{peer_, self_.layout().rank, tag_};
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      auto ready = [&] {
        auto it = net.mail_.find(key);
        return (it != net.mail_.end() && !it->second.empty()) || net.gone_.count(peer_) > 0 ||
               !self_.aborted_.empty();
      };
      const auto timed_out = [&] { return RuntimeFailure("timed out after " + std::to_string(timeout.count()) + " ms"); };
      if (!net.cv_.wait_until(lock, deadline, ready)) throw timed_out();
      auto it = net.mail_.find(key);
      if (it != net.mail_.end() && !it->second.empty()) {
        // In transit until it arrives (the sender's transit function).
        const auto arrives = it->second.front().arrives;
        if (arrives > deadline) throw timed_out();
        while (std::chrono::steady_clock::now() < arrives) net.cv_.wait_until(lock, arrives);
        it = net.mail_.find(key);  // FIFO: the front is still this rank's to take
        torch::Tensor got = it->second.front().tensor;
        it->second.erase(it->second.begin());
        t_.copy_(got);
        return;
      }
      if (!self_.aborted_.empty()) throw RuntimeFailure("aborted: " + self_.aborted_);
      throw RuntimeFailure("the peer " + net.gone_.at(peer_));
    }
    MemTransport& self_;
    torch::Tensor t_;
    int peer_, tag_;
  };

  // Rules::kNccl: send `index` to `peer` completes once its receive is posted.
  struct NcclSend : Transfer::Op {
    NcclSend(MemTransport& self, int peer, std::int64_t index) : self_(self), peer_(peer), index_(index) {}
    void wait(std::chrono::milliseconds timeout) override {
      MemNetwork& net = self_.net_;
      std::unique_lock<std::mutex> lock(net.mu_);
      const MemNetwork::Link& link = net.links_[{self_.layout().rank, peer_}];
      auto ready = [&] { return link.receives > index_ || net.gone_.count(peer_) > 0 || !self_.aborted_.empty(); };
      if (!net.cv_.wait_until(lock, std::chrono::steady_clock::now() + timeout, ready))
        throw RuntimeFailure("timed out after " + std::to_string(timeout.count()) +
                             " ms: its receive was never posted (an NCCL send waits for it)");
      if (link.receives > index_) return;
      if (!self_.aborted_.empty()) throw RuntimeFailure("aborted: " + self_.aborted_);
      throw RuntimeFailure("the peer " + net.gone_.at(peer_));
    }
    bool done() override {
      std::lock_guard<std::mutex> lock(self_.net_.mu_);
      return self_.net_.links_[{self_.layout().rank, peer_}].receives > index_;
    }
    MemTransport& self_;
    int peer_;
    std::int64_t index_;
  };
  // Rules::kNccl: receive `index` from `peer` takes that peer's send `index`.
  struct NcclRecv : Transfer::Op {
    NcclRecv(MemTransport& self, torch::Tensor t, int peer, int tag, std::int64_t index)
        : self_(self), t_(std::move(t)), peer_(peer), tag_(tag), index_(index) {}
    void wait(std::chrono::milliseconds timeout) override {
      MemNetwork& net = self_.net_;
      std::unique_lock<std::mutex> lock(net.mu_);
      MemNetwork::Link& link = net.links_[{peer_, self_.layout().rank}];
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      auto ready = [&] { return link.sent.count(index_) > 0 || net.gone_.count(peer_) > 0 || !self_.aborted_.empty(); };
      if (!net.cv_.wait_until(lock, deadline, ready))
        throw RuntimeFailure("timed out after " + std::to_string(timeout.count()) + " ms");
      auto it = link.sent.find(index_);
      if (it == link.sent.end()) {
        if (!self_.aborted_.empty()) throw RuntimeFailure("aborted: " + self_.aborted_);
        throw RuntimeFailure("the peer " + net.gone_.at(peer_));
      }
      if (it->second.tag != tag_)
        throw RuntimeFailure("NCCL matches messages by their order, not their tag: receive " + std::to_string(index_) +
                             " from this peer was posted for tag " + std::to_string(tag_) + ", and its send " +
                             std::to_string(index_) + " carries tag " + std::to_string(it->second.tag) +
                             " (the two ranks' lists order their messages differently)");
      const auto arrives = it->second.arrives;  // in transit until then (the transit function)
      if (arrives > deadline) throw RuntimeFailure("timed out after " + std::to_string(timeout.count()) + " ms");
      while (std::chrono::steady_clock::now() < arrives) net.cv_.wait_until(lock, arrives);
      t_.copy_(link.sent.at(index_).tensor);
      link.sent.erase(index_);
      link.receive_tags.erase(index_);
    }
    MemTransport& self_;
    torch::Tensor t_;
    int peer_, tag_;
    std::int64_t index_;
  };

  void check_open() const {
    if (!aborted_.empty()) throw RuntimeFailure("aborted: " + aborted_);
  }

  std::vector<int> all_ranks() const {
    std::vector<int> v(layout().world_size);
    for (int r = 0; r < layout().world_size; ++r) v[r] = r;
    return v;
  }

  // Sums `t` over `members` in member order (deterministic), with the bounded wait.
  void allreduce(const std::string& group, const std::vector<int>& members, torch::Tensor& t,
                 const std::string& what) {
    check_open();
    int index = -1;
    for (int i = 0; i < static_cast<int>(members.size()); ++i)
      if (members[i] == layout().rank) index = i;
    HARP_CHECK(index >= 0) << "rank " << layout().rank << " is not in group " << group;
    const std::string key = group + "#" + std::to_string(sequence_[group]++);
    const int n = static_cast<int>(members.size());
    std::unique_lock<std::mutex> lock(net_.mu_);
    MemNetwork::Collective& c = net_.collectives_[key];
    c.parts[index] = t.clone();
    if (static_cast<int>(c.parts.size()) == n) {
      c.sum = c.parts.at(0).clone();
      for (int i = 1; i < n; ++i) c.sum += c.parts.at(i);
      net_.cv_.notify_all();
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    int gone = -1;
    auto ready = [&] {
      if (c.sum.defined() || !aborted_.empty()) return true;
      for (int i = 0; i < n; ++i)
        if (net_.gone_.count(members[i]) && !c.parts.count(i)) gone = members[i];
      return gone >= 0;
    };
    if (!net_.cv_.wait_until(lock, deadline, ready))
      throw RuntimeFailure(what + ": timed out after " + std::to_string(timeout().count()) + " ms");
    if (!c.sum.defined()) {
      if (!aborted_.empty()) throw RuntimeFailure(what + ": aborted: " + aborted_);
      throw RuntimeFailure(what + ": rank " + std::to_string(gone) + " " + net_.gone_.at(gone));
    }
    t.copy_(c.sum);
    if (++c.taken == n) net_.collectives_.erase(key);
  }

  MemNetwork& net_;
  std::string aborted_;
  bool dropping_ = false;
  int step_ = 0;  // of the last action begun (the transit function's)
  std::map<std::string, int> sequence_;
};

MemNetwork::MemNetwork(int world_size, std::vector<Fault> faults, Rules rules)
    : world_size_(world_size), faults_(std::move(faults)), rules_(rules) {}

std::unique_ptr<Transport> MemNetwork::connect(const RankLayout& layout, std::chrono::milliseconds timeout) {
  return std::make_unique<MemTransport>(*this, layout, timeout);
}

}  // namespace harp::runtime
