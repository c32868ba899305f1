// c10d process groups behind C10dTransport (see comm.h). Gloo matches point-to-point messages by
// (peer, tag); NCCL ignores tags, so correctness never depends on them: the lowered
// schedule orders every pair's messages consistently (docs/schedule_format.md) and the
// tag only helps debugging.
//
// The groups are held through c10d::Backend, the base of Gloo's and NCCL's process groups
// (libtorch 2.x). ProcessGroupNCCL.hpp compiles to nothing unless USE_C10D_NCCL is
// defined (src/CMakeLists.txt defines it for a CUDA libtorch).
#include "harp/runtime/comm/comm.h"

#include "gloo_group.h"
#include "harp/launch/worker_env.h"

#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace harp::runtime {
namespace {

// libtorch 2.x records every Gloo and NCCL operation in a process-wide flight recorder (a
// ring buffer read when debugging hangs). Its recording made a run of many small
// all-reduces crawl here (Equivalence.UnevenDataParallelShares: 4 s without it, not done
// after 10 minutes with it, the rank threads inside FlightRecorder::recordWithResetEnabled),
// so it is off unless asked for: TORCH_FR_BUFFER_SIZE (or its older name
// TORCH_NCCL_TRACE_BUFFER_SIZE) set in the environment turns it on as libtorch documents.
// Set at load time, before any thread or group exists.
const bool kFlightRecorderOff = [] {
  if (std::getenv("TORCH_FR_BUFFER_SIZE") == nullptr && std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE") == nullptr)
    setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
  return true;
}();

using Group = c10d::Backend;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

c10::intrusive_ptr<Group> make_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                     int rank, int size, std::chrono::milliseconds timeout) {
  auto parsed = launch::WorkerEnv::from_env();  // checked by harp train before any group is made
  if (!parsed.ok()) throw RuntimeFailure(parsed.status().message());
  return make_gloo_group(store, name, rank, size, timeout, *parsed);
}

// A group of `size` ranks on NCCL, under its own store prefix `name`.
c10::intrusive_ptr<Group> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                          int rank, int size, std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  // NCCL's watchdog ends the process when a work outlives this; HARP's own check
  // (finish_step) must come first to name the transfer and abort cleanly (comm.h).
  options->timeout = 2 * timeout + std::chrono::minutes(1);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, size, options);
#else
  (void)store, (void)name, (void)rank, (void)size, (void)timeout;
  throw RuntimeFailure("this build of harp has no NCCL (its libtorch was not built with USE_C10D_NCCL): train on "
                       "the CPU (--device cpu), or build against a CUDA libtorch (docs/runtime.md, \"GPUs\")");
#endif
}

// The first line of a c10d exception's message (the rest is a C++ stack).
std::string first_line(const std::exception& e) {
  std::string msg = e.what();
  const size_t nl = msg.find('\n');
  return nl == std::string::npos ? msg : msg.substr(0, nl);
}

// The host waits. Throws RuntimeFailure("<what>: <reason>"), or just "<reason>" when
// `what` is empty.
void wait_or_throw(const WorkPtr& work, std::chrono::milliseconds timeout, const std::string& what) {
  const std::string prefix = what.empty() ? "" : what + ": ";
  try {
    if (!work->wait(timeout)) throw RuntimeFailure(prefix + "timed out after " + std::to_string(timeout.count()) + " ms");
  } catch (const RuntimeFailure&) {
    throw;
  } catch (const std::exception& e) {
    throw RuntimeFailure(prefix + first_line(e));
  }
}

// NCCL work that a stream was made to wait for, kept until the step's end checks it
// (finish_step). Added to by the rank's thread and by autograd's device thread (a
// tensor-parallel all-reduce in a backward), hence the lock.
class StreamWaits {
 public:
  void add(WorkPtr work, std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    works_.emplace_back(std::move(work), std::move(what));
  }
  std::vector<std::pair<WorkPtr, std::string>> take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(works_);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<WorkPtr, std::string>> works_;
};

// The current stream waits for NCCL's work (Work::wait without a timeout: a stream wait,
// where a timeout would make the host poll until the work is done); the step's end
// checks that it completed. Throws RuntimeFailure("<reason>") if it already failed.
void stream_wait(const WorkPtr& work, StreamWaits& waits, std::string what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    throw RuntimeFailure(first_line(e));
  }
  waits.add(work, std::move(what));
}

// c10d work as a Transfer::Op: waited on the stream when it is NCCL's (`waits` set).
class C10dOp : public Transfer::Op {
 public:
  C10dOp(WorkPtr work, std::shared_ptr<StreamWaits> waits, std::string what)
      : work_(std::move(work)), waits_(std::move(waits)), what_(std::move(what)) {}
  void wait(std::chrono::milliseconds timeout) override { wait_or_throw(work_, timeout, ""); }
  void wait_on_stream(std::chrono::milliseconds timeout) override {
    if (!waits_) return wait(timeout);
    stream_wait(work_, *waits_, what_);
  }
  // Gloo's flag, or NCCL's end event queried (no wait).
  bool done() override { return work_->isCompleted(); }

 private:
  WorkPtr work_;
  std::shared_ptr<StreamWaits> waits_;
  std::string what_;
};

}  // namespace

struct C10dTransport::Groups {
  c10::intrusive_ptr<Group> world;         // Gloo, CPU: metrics, barriers, and the CPU's transfers
  c10::intrusive_ptr<Group> dp, tp, tied;  // Gloo on the CPU, NCCL on CUDA
  // NCCL: one two-rank group per directed pair (sender is group rank 0), by (sender, receiver).
  std::map<std::pair<int, int>, c10::intrusive_ptr<Group>> links;
  bool nccl = false;                   // dp, tp, tied and links are NCCL's
  std::shared_ptr<StreamWaits> waits;  // set when nccl

  std::vector<Group*> nccl_groups() const {
    std::vector<Group*> out;
    if (!nccl) return out;
    for (const auto* g : {&dp, &tp, &tied})
      if (*g) out.push_back(g->get());
    for (const auto& [ends, g] : links) out.push_back(g.get());
    return out;
  }
};

bool C10dTransport::nccl_available() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

C10dTransport::C10dTransport(RankLayout layout, std::chrono::milliseconds timeout)
    : Transport(std::move(layout), timeout), groups_(std::make_unique<Groups>()) {}

C10dTransport::~C10dTransport() {
  // NCCL's groups are shut down (their communicators destroyed) at a normal end, and
  // aborted after a failure, where a kernel may still wait for a peer that is gone.
  for (Group* g : groups_->nccl_groups()) {
    try {
      if (aborted_.empty() && std::uncaught_exceptions() == 0)
        g->shutdown();
      else
        g->abort();
    } catch (const std::exception&) {  // a destructor does not throw; the process is ending the run
    }
  }
}

std::unique_ptr<C10dTransport> C10dTransport::create(c10::intrusive_ptr<c10d::Store> store,
                                                     const RankLayout& layout, std::chrono::milliseconds timeout,
                                                     bool tied_group, const torch::Device& device) {
  std::unique_ptr<C10dTransport> c(new C10dTransport(layout, timeout));
  const bool nccl = device.is_cuda();
  c->groups_->nccl = nccl;
  if (nccl) c->groups_->waits = std::make_shared<StreamWaits>();
  auto group = [&](const std::string& name, int rank, int size) -> c10::intrusive_ptr<Group> {
    if (nccl) return make_nccl_group(store, name, rank, size, timeout);
    return make_group(store, name, rank, size, timeout);
  };
  c->groups_->world = make_group(store, "world", layout.rank, layout.world_size, timeout);
  // Each group on its own store prefix: only its members take part in making it.
  const std::string stage = std::to_string(layout.stage);
  if (layout.dp() > 1)
    c->groups_->dp = group("dp" + stage + "." + std::to_string(layout.tp_rank), layout.dp_rank, layout.dp());
  if (layout.tp() > 1)
    c->groups_->tp = group("tp" + stage + "." + std::to_string(layout.dp_rank), layout.tp_rank, layout.tp());
  if (tied_group) {
    const std::vector<int> members = tied_group_members(layout);
    for (int i = 0; i < static_cast<int>(members.size()); ++i)
      if (members[i] == layout.rank) c->groups_->tied = group("tied", i, static_cast<int>(members.size()));
  }
  if (nccl) {
    // The communicators now, not inside the first step's collectives (NCCL makes them
    // lazily): dp, then tp, then tied on every rank. Each kind's groups are disjoint and
    // every member reaches a group after finishing the same earlier kinds, so the
    // blocking set-up cannot wait in a cycle.
    for (const auto* g : {&c->groups_->dp, &c->groups_->tp, &c->groups_->tied})
      if (*g) (*g)->eagerConnectSingleDevice(device);
    // Every rank walks the links in the same sorted order, creating and first using its
    // own: the pair that comes first among those not yet set up always has both its
    // ranks at it, so NCCL's blocking set-up cannot wait in a cycle.
    for (const auto& [from, to] : layout.links()) {
      if (from != layout.rank && to != layout.rank) continue;
      auto g = make_nccl_group(store, "link" + std::to_string(from) + "." + std::to_string(to),
                               from == layout.rank ? 0 : 1, 2, timeout);
      // A first message over it: NCCL sets up its point-to-point communicator now.
      std::vector<at::Tensor> one{torch::zeros({1}, torch::TensorOptions().device(device))};
      const std::string what = "setting up the NCCL link " + std::to_string(from) + " -> " + std::to_string(to);
      if (from == layout.rank)
        wait_or_throw(g->send(one, 1, 0), timeout, what);
      else
        wait_or_throw(g->recv(one, 0, 0), timeout, what);
      c->groups_->links.emplace(std::make_pair(from, to), std::move(g));
    }
  }
  return c;
}

void C10dTransport::check_open() const {
  if (!aborted_.empty()) throw RuntimeFailure("aborted: " + aborted_);
}

void C10dTransport::abort(const std::string& reason) {
  if (aborted_.empty()) aborted_ = reason.empty() ? "aborted" : reason;
  // NCCL's kernels that wait for a peer are ended (Gloo's pending work is not cancelled:
  // peers notice when this process exits and its sockets close).
  for (Group* g : groups_->nccl_groups()) g->abort();
}

Transfer C10dTransport::isend(torch::Tensor& t, int peer, int tag, const std::string& what) {
  check_open();
  std::vector<at::Tensor> v{t};
  if (groups_->links.empty())
    return Transfer(std::make_shared<C10dOp>(groups_->world->send(v, peer, tag), nullptr, ""), what, peer);
  const auto link = groups_->links.find({layout().rank, peer});
  HARP_CHECK(link != groups_->links.end()) << "rank " << layout().rank << " has no link to rank " << peer;
  return Transfer(
      std::make_shared<C10dOp>(link->second->send(v, 1, tag), groups_->waits, what + " " + std::to_string(peer)), what,
      peer);
}

Transfer C10dTransport::irecv(torch::Tensor& t, int peer, int tag, const std::string& what) {
  check_open();
  std::vector<at::Tensor> v{t};
  if (groups_->links.empty())
    return Transfer(std::make_shared<C10dOp>(groups_->world->recv(v, peer, tag), nullptr, ""), what, peer);
  const auto link = groups_->links.find({peer, layout().rank});
  HARP_CHECK(link != groups_->links.end()) << "rank " << layout().rank << " has no link from rank " << peer;
  return Transfer(
      std::make_shared<C10dOp>(link->second->recv(v, 0, tag), groups_->waits, what + " " + std::to_string(peer)), what,
      peer);
}

void C10dTransport::complete(const WorkPtr& work, const std::string& what) {
  if (!groups_->nccl) return wait_or_throw(work, timeout(), what);
  try {
    stream_wait(work, *groups_->waits, what);
  } catch (const RuntimeFailure& e) {
    throw RuntimeFailure(what + ": " + e.what());
  }
}

void C10dTransport::finish_step() {
  if (!groups_->nccl) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout();
  for (const auto& [work, what] : groups_->waits->take()) {
    std::string failure;
    try {
      // Polled, not waited: a wait that cannot end (a peer gone) must not hold the host.
      while (!work->isCompleted() && failure.empty()) {
        if (std::chrono::steady_clock::now() > deadline)
          failure = "timed out after " + std::to_string(timeout().count()) + " ms";
        else
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (failure.empty() && work->exception()) std::rethrow_exception(work->exception());
    } catch (const std::exception& e) {
      failure = first_line(e);
    }
    if (failure.empty()) continue;
    abort(what + ": " + failure);
    throw RuntimeFailure(what + ": " + failure);
  }
}

std::string C10dTransport::in_dp_group(const std::string& what) const {
  return what + " (data-parallel group of stage " + std::to_string(layout().stage) + ")";
}

void C10dTransport::allreduce_dp(torch::Tensor& t, const std::string& what) {
  check_open();
  if (!groups_->dp) return;
  std::vector<at::Tensor> v{t};
  complete(groups_->dp->allreduce(v), in_dp_group(what));
}

void C10dTransport::reduce_scatter_dp(torch::Tensor& flat, torch::Tensor& shard, const std::string& what) {
  check_open();
  if (!groups_->dp) {
    shard.copy_(flat.view_as(shard));
    return;
  }
  const int n = layout().dp(), r = layout().dp_rank;
  HARP_CHECK_EQ(flat.numel(), n * shard.numel());
  const std::string where = in_dp_group(what);
  std::vector<at::Tensor> chunks = flat.view({-1}).chunk(n);
  if (flat.is_cuda()) {
    std::vector<at::Tensor> out{shard};
    std::vector<std::vector<at::Tensor>> in{chunks};
    complete(groups_->dp->reduce_scatter(out, in), where);
    return;
  }
  // Round k: send the partial sum of chunk r - 1 - k to the next member, add the previous
  // member's partial sum of chunk r - 2 - k; after n - 1 rounds chunk r holds all n.
  std::vector<at::Tensor> incoming{torch::empty_like(chunks[0])};
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int k = 0; k + 1 < n; ++k) {
    std::vector<at::Tensor> outgoing{chunks[((r - 1 - k) % n + n) % n]};
    auto sent = groups_->dp->send(outgoing, next, k);
    wait_or_throw(groups_->dp->recv(incoming, prev, k), timeout(), where);
    wait_or_throw(sent, timeout(), where);
    chunks[((r - 2 - k) % n + n) % n].add_(incoming[0]);
  }
  shard.copy_(chunks[r].view_as(shard));
}

void C10dTransport::all_gather_dp(torch::Tensor& shard, torch::Tensor& flat, const std::string& what) {
  check_open();
  if (!groups_->dp) {
    flat.copy_(shard.view_as(flat));
    return;
  }
  const int n = layout().dp();
  HARP_CHECK_EQ(flat.numel(), n * shard.numel());
  std::vector<std::vector<at::Tensor>> out{flat.view({-1}).chunk(n)};
  std::vector<at::Tensor> in{shard.view({-1})};
  complete(groups_->dp->allgather(out, in), in_dp_group(what));
}

void C10dTransport::allreduce_tp(torch::Tensor& t, const std::string& what) {
  check_open();
  if (!groups_->tp) return;
  std::vector<at::Tensor> v{t};
  complete(groups_->tp->allreduce(v),
           what + " (tensor-parallel group of stage " + std::to_string(layout().stage) + ")");
}

void C10dTransport::allreduce_tied(torch::Tensor& t, const std::string& what) {
  check_open();
  HARP_CHECK(groups_->tied) << "rank " << layout().rank << " is not in the tied-embedding group";
  std::vector<at::Tensor> v{t};
  complete(groups_->tied->allreduce(v), what + " (tied-embedding group)");
}

void C10dTransport::allreduce_world(torch::Tensor& t, const std::string& what) {
  check_open();
  std::vector<at::Tensor> v{t};
  wait_or_throw(groups_->world->allreduce(v), timeout(), what + " (all ranks)");
}

double C10dTransport::round_trip(int peer, std::int64_t bytes, bool initiator, const std::string& what) {
  check_open();
  std::vector<at::Tensor> v{torch::zeros({std::max<std::int64_t>(1, bytes / 4)}, torch::kFloat32)};
  const std::string where = what + (initiator ? " (probing the link to rank " : " (echoing a probe of rank ") +
                            std::to_string(peer) + ")";
  const auto start = std::chrono::steady_clock::now();
  if (initiator) wait_or_throw(groups_->world->send(v, peer, kProbeTag), timeout(), where);
  wait_or_throw(groups_->world->recv(v, peer, kProbeTag), timeout(), where);
  if (!initiator) wait_or_throw(groups_->world->send(v, peer, kProbeTag), timeout(), where);
  return initiator ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() : 0.0;
}

void C10dTransport::barrier(const std::string& what) {
  check_open();
  wait_or_throw(groups_->world->barrier(), timeout(), what + " (all ranks)");
}

}  // namespace harp::runtime
