// Rank layouts (rank_layout.h).
#include "harp/plan/rank_layout.h"

#include <algorithm>
#include <map>
#include <string>

namespace harp::plan {

StatusOr<RankLayout> layout_for(const Plan& plan, int world_size, int rank) {
  RankLayout l;
  l.rank = rank;
  l.world_size = world_size;
  std::string shape;
  bool all_devices = true;
  int needed = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto& st = plan.stages[s];
    if (st.dp < 1 || st.tp < 1)
      return failed_precondition("stage " + std::to_string(s) + " has dp = " + std::to_string(st.dp) +
                                 " and tp = " + std::to_string(st.tp) + "; both must be at least 1");
    if (st.shares.empty() && plan.microbatch_size % st.dp != 0)
      return failed_precondition("stage " + std::to_string(s) + " has dp = " + std::to_string(st.dp) +
                                 " which does not divide microbatch_size " +
                                 std::to_string(plan.microbatch_size));
    if (!st.shares.empty()) {
      int sum = 0;
      for (int n : st.shares) sum += std::max(0, n);
      if (static_cast<int>(st.shares.size()) != st.dp || sum != plan.microbatch_size ||
          *std::min_element(st.shares.begin(), st.shares.end()) < 1)
        return failed_precondition("stage " + std::to_string(s) + "'s shares must be dp = " + std::to_string(st.dp) +
                                   " positive sample counts summing to microbatch_size " +
                                   std::to_string(plan.microbatch_size));
    }
    std::vector<int> firsts;
    for (int d = 0; d <= st.dp; ++d)
      firsts.push_back(d < st.dp ? st.share_offset(d, plan.microbatch_size) : plan.microbatch_size);
    l.stage_firsts.push_back(std::move(firsts));
    const int ranks = st.dp * st.tp;
    all_devices = all_devices && static_cast<int>(st.devices.size()) == ranks;
    needed += ranks;
    shape += (s ? " + " : "") + std::to_string(st.dp) + (st.tp > 1 ? "x" + std::to_string(st.tp) : "");
    l.stage_tp.push_back(st.tp);
  }
  if (needed != world_size)
    return failed_precondition("the plan needs " + std::to_string(needed) + " ranks (" + shape +
                               " replicas (x tp) per stage) but WORLD_SIZE is " + std::to_string(world_size) +
                               "; launch with --nproc " + std::to_string(needed));
  if (rank < 0 || rank >= world_size)
    return failed_precondition("RANK " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) + ")");
  l.microbatch_size = plan.microbatch_size;
  l.stage_ranks.resize(plan.num_stages());
  l.rank_device.assign(world_size, -1);
  if (all_devices) {
    // Rank r runs the r-th smallest device id of the plan: the plan's device map, read
    // back rather than re-derived (devices the plan leaves idle get no rank).
    std::map<int, std::pair<int, int>> owner;  // device -> (stage, index in its devices)
    for (int s = 0; s < plan.num_stages(); ++s)
      for (int i = 0; i < static_cast<int>(plan.stages[s].devices.size()); ++i)
        if (!owner.emplace(plan.stages[s].devices[i], std::make_pair(s, i)).second)
          return failed_precondition("device " + std::to_string(plan.stages[s].devices[i]) +
                                     " appears twice in the plan; each device runs one rank");
    for (int s = 0; s < plan.num_stages(); ++s) l.stage_ranks[s].assign(plan.stages[s].devices.size(), -1);
    int r = 0;
    for (const auto& [device, where] : owner) {
      l.rank_device[r] = device;
      l.stage_ranks[where.first][where.second] = r++;
    }
  } else {
    int next = 0;
    for (int s = 0; s < plan.num_stages(); ++s)
      for (int i = 0; i < plan.stages[s].dp * plan.stages[s].tp; ++i) l.stage_ranks[s].push_back(next++);
  }
  for (int s = 0; s < l.num_stages(); ++s)
    for (int i = 0; i < static_cast<int>(l.stage_ranks[s].size()); ++i)
      if (l.stage_ranks[s][i] == rank) {
        l.stage = s;
        l.dp_rank = i / l.tp_of(s);
        l.tp_rank = i % l.tp_of(s);
      }
  return l;
}

std::vector<int> RankLayout::dp_group() const {
  std::vector<int> members;
  for (int d = 0; d < dp(); ++d) members.push_back(rank_of(stage, d, tp_rank));
  return members;
}

std::vector<int> RankLayout::tp_group() const {
  std::vector<int> members;
  for (int t = 0; t < tp(); ++t) members.push_back(rank_of(stage, dp_rank, t));
  return members;
}

std::vector<RankLayout::Exchange> RankLayout::exchanges(int s, int dp_rank, int tp_rank, int other_stage,
                                                       bool sending) const {
  std::vector<Exchange> out;
  const int replicas = dp_of(other_stage), other_tp = tp_of(other_stage), own_tp = tp_of(s);
  const int offset = first_sample(s, dp_rank), end = first_sample(s, dp_rank + 1);
  for (int d = 0; d < replicas; ++d) {
    const int lo = std::max(first_sample(other_stage, d), offset), hi = std::min(first_sample(other_stage, d + 1), end);
    if (lo >= hi) continue;
    if (!sending) {
      out.push_back(Exchange{rank_of(other_stage, d, tp_rank % other_tp), lo - offset, hi - lo});
      continue;
    }
    for (int u = tp_rank; u < other_tp; u += own_tp) out.push_back(Exchange{rank_of(other_stage, d, u), lo - offset, hi - lo});
  }
  return out;
}

std::vector<std::pair<int, int>> RankLayout::links() const {
  std::vector<std::pair<int, int>> out;
  for (int s = 0; s < num_stages(); ++s)
    for (int other : {s - 1, s + 1}) {
      if (other < 0 || other >= num_stages()) continue;
      for (int d = 0; d < dp_of(s); ++d)
        for (int t = 0; t < tp_of(s); ++t)
          for (const Exchange& e : exchanges(s, d, t, other, true)) out.emplace_back(rank_of(s, d, t), e.peer);
    }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace harp::plan
