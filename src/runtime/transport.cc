// Rank layouts and the Transfer wrapper shared by every transport (see transport.h).
#include "harp/runtime/transport.h"

#include <algorithm>
#include <map>

namespace harp::runtime {

StatusOr<RankLayout> layout_for(const plan::Plan& plan, int world_size, int rank) {
  RankLayout l;
  l.rank = rank;
  l.world_size = world_size;
  std::string shape;
  bool all_devices = true;
  int needed = 0;
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
    all_devices = all_devices && static_cast<int>(st.devices.size()) == st.dp;
    needed += st.dp;
    shape += (s ? " + " : "") + std::to_string(st.dp);
  }
  if (needed != world_size)
    return failed_precondition("the plan needs " + std::to_string(needed) + " ranks (" + shape +
                               " data-parallel replicas per stage) but WORLD_SIZE is " +
                               std::to_string(world_size) + "; launch with --nproc " + std::to_string(needed));
  if (rank < 0 || rank >= world_size)
    return failed_precondition("RANK " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) + ")");
  l.stage_ranks.resize(plan.num_stages());
  l.rank_device.assign(world_size, -1);
  if (all_devices) {
    // Rank r runs the r-th smallest device id of the plan: the plan's device map, read
    // back rather than re-derived (devices the plan leaves idle get no rank).
    std::map<int, std::pair<int, int>> owner;  // device -> (stage, replica)
    for (int s = 0; s < plan.num_stages(); ++s)
      for (int d = 0; d < plan.stages[s].dp; ++d)
        if (!owner.emplace(plan.stages[s].devices[d], std::make_pair(s, d)).second)
          return failed_precondition("device " + std::to_string(plan.stages[s].devices[d]) +
                                     " appears in two stages of the plan; each device runs one replica");
    int r = 0;
    for (const auto& [device, where] : owner) {
      l.rank_device[r] = device;
      auto& ranks = l.stage_ranks[where.first];
      if (static_cast<int>(ranks.size()) <= where.second) ranks.resize(where.second + 1, -1);
      ranks[where.second] = r++;
    }
  } else {
    int next = 0;
    for (int s = 0; s < plan.num_stages(); ++s)
      for (int d = 0; d < plan.stages[s].dp; ++d) l.stage_ranks[s].push_back(next++);
  }
  for (int s = 0; s < l.num_stages(); ++s)
    for (int d = 0; d < static_cast<int>(l.stage_ranks[s].size()); ++d)
      if (l.stage_ranks[s][d] == rank) {
        l.stage = s;
        l.dp_rank = d;
      }
  return l;
}

std::vector<int> tied_group_members(const RankLayout& layout) {
  std::vector<int> members = layout.stage_ranks.front();
  if (layout.num_stages() > 1)
    members.insert(members.end(), layout.stage_ranks.back().begin(), layout.stage_ranks.back().end());
  return members;
}

Transfer::Transfer(std::shared_ptr<Op> op, std::string what, int peer)
    : op_(std::move(op)), what_(std::move(what)), peer_(peer) {}

void Transfer::wait(std::chrono::milliseconds timeout) {
  if (!op_) return;
  std::shared_ptr<Op> op = std::move(op_);
  op_.reset();
  try {
    op->wait(timeout);
  } catch (const RuntimeFailure& e) {
    throw RuntimeFailure(what_ + " " + std::to_string(peer_) + ": " + e.what());
  }
}

}  // namespace harp::runtime
