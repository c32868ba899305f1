// The exact search's problem for one subcluster order: its meshes, links and cuts, the
// periods worth trying, and a period no plan can beat (see dp_table.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "dp_table.h"
#include "harp/cost/comm_cost.h"

namespace harp::planner {
namespace {

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

std::vector<std::pair<int, bool>> mesh_sizes(int dpn, int nodes) {
  std::vector<std::pair<int, bool>> sizes;
  for (int z = 1; z <= dpn; z *= 2) sizes.push_back({z, false});
  for (int m = 1; m <= nodes; ++m)
    if (m > 1 || !is_power_of_two(dpn)) sizes.push_back({m * dpn, true});
  return sizes;
}

DpProblem make_dp_problem(const StageCosts& costs, const std::vector<int>& order,
                          const SearchOptions& options) {
  DpProblem p;
  const auto& cluster = costs.cluster();
  p.costs = &costs;
  p.order = order;
  p.C = static_cast<int>(order.size());
  p.L = costs.num_layers();
  p.B = options.microbatches;
  p.allow_idle = options.allow_idle_devices;
  p.harp = options.schedule == plan::ScheduleKind::kHarp1F1B;
  p.candidates = options.candidates;
  p.recompute = options.recompute.empty() ? std::vector<Recompute>{Recompute::kNone} : options.recompute;
  const int mbs = costs.microbatch_size();
  for (int pos = 0; pos < p.C; ++pos) {
    const int sub = order[pos];
    const auto& sc = cluster.subclusters[sub];
    const int dpn = sc.devices_per_node;
    p.devices.push_back(sc.num_devices());
    p.devices_per_node.push_back(dpn);
    p.max_devices = std::max(p.max_devices, sc.num_devices());
    p.usable.push_back(costs.usable_memory_bytes(sub));
    p.intra.push_back(sc.intra_node);
    p.inter.push_back(sc.inter_node);
    const int max_tp = options.max_tp > 0 ? std::min(options.max_tp, dpn) : dpn;
    std::vector<DpMesh> meshes;
    for (auto [z, whole] : mesh_sizes(dpn, sc.nodes))
      for (int tp = 1; tp <= max_tp; tp *= 2) {
        if (z % tp != 0 || (whole && dpn % tp != 0)) continue;
        const int dp = z / tp;
        if (mbs % dp != 0 || !costs.has(sub, dp, tp)) continue;
        for (int zero : zero_levels(options, dp)) meshes.push_back({z, dp, tp, zero, whole, costs.view(sub, dp, tp, zero)});
      }
    p.meshes.push_back(std::move(meshes));
  }
  p.linked.assign(p.C, std::vector<char>(p.C, 0));
  p.cross.assign(p.C, std::vector<cluster::Link>(p.C));
  for (int a = 0; a < p.C; ++a)
    for (int b = a + 1; b < p.C; ++b)
      if (auto link = cluster.link_between(order[a], order[b])) {
        p.linked[a][b] = 1;
        p.cross[a][b] = *link;
      }
  for (int l = 0; l < p.L; ++l) p.cut_bytes.push_back(costs.cut_bytes(l));
  auto times_over = [&](const cluster::Link& link) {
    std::vector<Seconds> t(p.L);
    for (int l = 0; l < p.L; ++l) t[l] = cost::p2p_s(p.cut_bytes[l], link);
    return t;
  };
  p.cut_cross_s.assign(p.C * p.C, {});
  for (int a = 0; a < p.C; ++a) {
    p.cut_intra_s.push_back(times_over(p.intra[a]));
    p.cut_inter_s.push_back(times_over(p.inter[a]));
    for (int b = a + 1; b < p.C; ++b)
      if (p.linked[a][b]) p.cut_cross_s[a * p.C + b] = times_over(p.cross[a][b]);
  }
  add_mixed_stages(p, options);
  p.valid = true;
  if (!p.allow_idle)
    for (int pos = 0; pos + 1 < p.C; ++pos) p.valid = p.valid && p.linked[pos][pos + 1];
  return p;
}

std::vector<Seconds> candidate_caps(const DpProblem& p) {
  std::vector<Seconds> caps;
  // Periods the incumbent beats are left out (the search would drop them): every
  // stage time grows with its last layer, so the rest of a row goes with them. So are
  // those below the period floor (DpProblem::period_floor_s; the search starts there).
  auto add = [&](Seconds cap) {
    if (!p.cap_useful(cap)) return false;
    if (cap >= p.period_floor_s) caps.push_back(cap);
    return true;
  };
  for (int pos = 0; pos < p.C; ++pos) {
    for (const DpMesh& m : p.meshes[pos])
      for (int l = 0; l < p.L; ++l)
        for (int l1 = l + 1; l1 <= p.L; ++l1) {
          if (m.view.static_bytes(l, l1) > p.usable[pos]) break;
          bool any = false;
          for (Recompute r : p.recompute) any = add(m.view.compute_s(l, l1, r)) || any;
          if (!any) break;
        }
    for (const DpMixed& x : p.mixed[pos])
      for (int l = 0; l < p.L; ++l)
        for (int l1 = l + 1; l1 <= p.L; ++l1) {
          if (x.view.static_bytes(false, 1, l, l1, Recompute::kNone) > p.usable[pos] ||
              x.view.static_bytes(true, 1, l, l1, Recompute::kNone) > p.usable[pos + 1])
            break;
          const Seconds fastest = x.view.split(l, l1).slowest_s;  // without recomputation
          if (p.beaten(fastest, x.view.end_s(l, l1))) break;
          for (Recompute r : p.recompute) add(r == Recompute::kNone ? fastest : x.view.split(l, l1, r).slowest_s);
        }
    if (p.any_mixed)
      for (int q = pos + 1; q < p.C; ++q)
        for (Seconds c : p.path_cut(pos, q)) add(c);
    for (int l = 0; l + 1 < p.L; ++l) {
      if (p.devices_per_node[pos] > 1) add(p.cut_intra_s[pos][l]);
      if (p.devices[pos] > p.devices_per_node[pos]) add(p.cut_inter_s[pos][l]);
      for (int q = pos + 1; q < p.C; ++q)
        if (p.linked[pos][q]) add(p.cut_cross_s[pos * p.C + q][l]);
    }
  }
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  return caps;
}

Seconds min_feasible_period_bound(const DpProblem& p) {
  Seconds bound = 0;
  for (int l = 0; l < p.L; ++l) {
    Seconds cheapest = std::numeric_limits<double>::infinity();
    for (int pos = 0; pos < p.C; ++pos) {
      for (const DpMesh& m : p.meshes[pos]) cheapest = std::min(cheapest, m.view.compute_s(l, l + 1));
      for (const DpMixed& x : p.mixed[pos]) {
        const Seconds t = x.view.split(l, l + 1).slowest_s;
        if (!p.beaten(t, x.view.end_s(l, l + 1))) cheapest = std::min(cheapest, t);
      }
    }
    bound = std::max(bound, cheapest);
  }
  // With every device used, the pipeline crosses each link between consecutive
  // subclusters at some cut. A mixed stage spanning the two does too: its part on pos
  // sends to the next stage, or its part on pos + 1 receives from the one before, over
  // that link or a path through it (no faster), unless it is the whole pipeline.
  if (!p.allow_idle)
    for (int pos = 0; pos + 1 < p.C; ++pos) {
      Seconds cheapest = std::numeric_limits<double>::infinity();
      for (int l = 0; l + 1 < p.L; ++l) cheapest = std::min(cheapest, p.cut_cross_s[pos * p.C + pos + 1][l]);
      if (p.C == 2)
        for (const DpMixed& x : p.mixed[pos]) cheapest = std::min(cheapest, x.view.split(0, p.L).slowest_s);
      if (std::isfinite(cheapest)) bound = std::max(bound, cheapest);
    }
  return bound;
}

}  // namespace harp::planner
