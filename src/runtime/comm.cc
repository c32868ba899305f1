// c10d process groups behind Comm (see comm.h). Gloo matches point-to-point messages by
// (peer, tag); NCCL ignores tags, so correctness never depends on them: the lowered
// schedule orders every pair's messages consistently (docs/schedule_format.md) and the
// tag only helps debugging.
#include "harp/runtime/comm.h"

#include <cstdlib>
#include <utility>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace harp::runtime {
namespace {

using Gloo = c10d::ProcessGroupGloo;
// c10d::ProcessGroup::Work in 1.13, c10d::Work in 2.x: take it from the API itself.
using WorkPtr = decltype(std::declval<Gloo&>().barrier());

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

c10::intrusive_ptr<Gloo> make_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                    int rank, int size, std::chrono::milliseconds timeout) {
  auto options = Gloo::Options::create(timeout);
  const std::string addr = env_or("MASTER_ADDR", "127.0.0.1");
  if (addr == "127.0.0.1" || addr == "localhost")
    options->devices.push_back(Gloo::createDeviceForHostname("127.0.0.1"));
  else if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    options->devices.push_back(Gloo::createDeviceForInterface(ifname));
  else
    options->devices.push_back(Gloo::createDefaultDevice());
  options->threads = 2;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  return c10::make_intrusive<Gloo>(prefixed, rank, size, options);
}

template <typename Work>
void wait_or_throw(const Work& work, std::chrono::milliseconds timeout, const std::string& what) {
  try {
    if (!work->wait(timeout)) throw RuntimeFailure(what + ": timed out after " + std::to_string(timeout.count()) + " ms");
  } catch (const RuntimeFailure&) {
    throw;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    const size_t nl = msg.find('\n');
    if (nl != std::string::npos) msg = msg.substr(0, nl);
    throw RuntimeFailure(what + ": " + msg);
  }
}

}  // namespace

struct Comm::Groups {
  c10::intrusive_ptr<Gloo> world, dp, tied;
};

StatusOr<RankLayout> layout_for(const plan::Plan& plan, int world_size, int rank) {
  RankLayout l;
  l.rank = rank;
  l.world_size = world_size;
  int next = 0;
  std::string shape;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto& st = plan.stages[s];
    if (st.tp != 1)
      return failed_precondition("stage " + std::to_string(s) + " uses tensor parallelism (tp = " +
                                 std::to_string(st.tp) +
                                 "); this runtime runs dp x pipeline plans only; plan with --max-tp 1");
    if (plan.microbatch_size % st.dp != 0)
      return failed_precondition("stage " + std::to_string(s) + " has dp = " + std::to_string(st.dp) +
                                 " which does not divide microbatch_size " +
                                 std::to_string(plan.microbatch_size));
    std::vector<int> ranks;
    for (int d = 0; d < st.dp; ++d) ranks.push_back(next++);
    l.stage_ranks.push_back(ranks);
    shape += (s ? " + " : "") + std::to_string(st.dp);
  }
  if (next != world_size)
    return failed_precondition("the plan needs " + std::to_string(next) + " ranks (" + shape +
                               " data-parallel replicas per stage) but WORLD_SIZE is " +
                               std::to_string(world_size) + "; launch with --nproc " + std::to_string(next));
  if (rank < 0 || rank >= world_size)
    return failed_precondition("RANK " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) + ")");
  for (int s = 0; s < l.num_stages(); ++s)
    for (int d = 0; d < static_cast<int>(l.stage_ranks[s].size()); ++d)
      if (l.stage_ranks[s][d] == rank) {
        l.stage = s;
        l.dp_rank = d;
      }
  return l;
}

Transfer::Transfer(std::shared_ptr<void> work, std::string what, int peer)
    : work_(std::move(work)), what_(std::move(what)), peer_(peer) {}

void Transfer::wait(std::chrono::milliseconds timeout) {
  if (!work_) return;
  auto work = std::static_pointer_cast<WorkPtr>(work_);
  work_.reset();
  wait_or_throw(*work, timeout, what_ + " " + std::to_string(peer_));
}

Comm::Comm(RankLayout layout, std::chrono::milliseconds timeout)
    : layout_(std::move(layout)), timeout_(timeout), groups_(std::make_unique<Groups>()) {}

Comm::~Comm() = default;

std::unique_ptr<Comm> Comm::create(c10::intrusive_ptr<c10d::Store> store, const RankLayout& layout,
                                   std::chrono::milliseconds timeout, bool tied_group) {
  std::unique_ptr<Comm> c(new Comm(layout, timeout));
  c->groups_->world = make_group(store, "world", layout.rank, layout.world_size, timeout);
  const auto& mine = layout.stage_ranks[layout.stage];
  if (mine.size() > 1)
    c->groups_->dp = make_group(store, "dp" + std::to_string(layout.stage), layout.dp_rank,
                                static_cast<int>(mine.size()), timeout);
  if (tied_group) {
    std::vector<int> members = layout.stage_ranks.front();
    if (layout.num_stages() > 1)
      members.insert(members.end(), layout.stage_ranks.back().begin(), layout.stage_ranks.back().end());
    for (int i = 0; i < static_cast<int>(members.size()); ++i)
      if (members[i] == layout.rank)
        c->groups_->tied = make_group(store, "tied", i, static_cast<int>(members.size()), timeout);
  }
  return c;
}

Transfer Comm::isend(torch::Tensor& t, int peer, int tag, const std::string& what) {
  std::vector<at::Tensor> v{t};
  auto work = std::make_shared<WorkPtr>(groups_->world->send(v, peer, tag));
  return Transfer(work, what, peer);
}

Transfer Comm::irecv(torch::Tensor& t, int peer, int tag, const std::string& what) {
  std::vector<at::Tensor> v{t};
  auto work = std::make_shared<WorkPtr>(groups_->world->recv(v, peer, tag));
  return Transfer(work, what, peer);
}

void Comm::allreduce_dp(torch::Tensor& t, const std::string& what) {
  if (!groups_->dp) return;
  std::vector<at::Tensor> v{t};
  wait_or_throw(groups_->dp->allreduce(v), timeout_, what + " (data-parallel group of stage " +
                                                         std::to_string(layout_.stage) + ")");
}

void Comm::allreduce_tied(torch::Tensor& t, const std::string& what) {
  HARP_CHECK(groups_->tied) << "rank " << layout_.rank << " is not in the tied-embedding group";
  std::vector<at::Tensor> v{t};
  wait_or_throw(groups_->tied->allreduce(v), timeout_, what + " (tied-embedding group)");
}

void Comm::allreduce_world(torch::Tensor& t, const std::string& what) {
  std::vector<at::Tensor> v{t};
  wait_or_throw(groups_->world->allreduce(v), timeout_, what + " (all ranks)");
}

void Comm::barrier(const std::string& what) {
  wait_or_throw(groups_->world->barrier(), timeout_, what + " (all ranks)");
}

c10::intrusive_ptr<c10d::Store> tcp_store_from_env(int rank, int world_size,
                                                   std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(std::stoi(env_or("MASTER_PORT", "29500")));
  o.isServer = rank == 0 && env_or("TORCHELASTIC_USE_AGENT_STORE", "") != "True";
  o.numWorkers = world_size;
  o.waitWorkers = false;
  o.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(env_or("MASTER_ADDR", "127.0.0.1"), o);
  const std::string attempt = env_or("TORCHELASTIC_RESTART_COUNT", "0");
  return c10::make_intrusive<c10d::PrefixStore>("harp" + attempt, store);
}

c10::intrusive_ptr<c10d::Store> hash_store() { return c10::make_intrusive<c10d::HashStore>(); }

}  // namespace harp::runtime
