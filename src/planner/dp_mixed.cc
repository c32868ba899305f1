// The exact search's mixed stages (see dp_table.h: DpMixed, fill_mixed_heads). A mixed
// stage heads its own front in each state (xoff_, xcnt_): the link into it reaches the
// next position too, so the stage before it pays a different link than into a regular
// head, and the two fronts never meet.
#include <algorithm>
#include <cmath>
#include <limits>

#include "dp_table.h"
#include "harp/cost/comm_cost.h"

namespace harp::planner {

void add_mixed_stages(DpProblem& p, const SearchOptions& options) {
  p.mixed.assign(p.C, {});
  if (!options.mixed_stages || p.allow_idle) return;
  const StageCosts& costs = *p.costs;
  const auto& cluster = costs.cluster();
  p.cut_path_s.assign(p.C * p.C, {});
  for (int a = 0; a < p.C; ++a)
    for (int b = a + 1; b < p.C; ++b) {
      const cluster::Link link = cluster.path_link(p.order[a], p.order[b]);
      for (int l = 0; l < p.L; ++l) p.cut_path_s[a * p.C + b].push_back(cost::p2p_s(p.cut_bytes[l], link));
    }
  auto max_tp = [&](int pos) {
    const int dpn = p.devices_per_node[pos];
    return options.max_tp > 0 ? std::min(options.max_tp, dpn) : dpn;
  };
  for (int pos = 0; pos + 1 < p.C; ++pos) {
    if (!p.linked[pos][pos + 1]) continue;
    const int pos1 = pos + 1;
    const auto& sa = cluster.subclusters[p.order[pos]];
    const auto& sb = cluster.subclusters[p.order[pos1]];
    for (int tp = 1; tp <= std::min(max_tp(pos), max_tp(pos1)); tp *= 2)
      for (auto [za, wa] : mesh_sizes(sa.devices_per_node, sa.nodes)) {
        if (za % tp != 0 || (wa && sa.devices_per_node % tp != 0)) continue;
        for (auto [zb, wb] : mesh_sizes(sb.devices_per_node, sb.nodes)) {
          if (zb % tp != 0 || (wb && sb.devices_per_node % tp != 0)) continue;
          const cost::MixedGroup g{p.order[pos], za / tp, p.order[pos1], zb / tp, tp};
          if (!cost::has_mixed(costs, g)) continue;
          p.mixed[pos].push_back({za, zb, wa, cost::mixed_view(costs, g)});
          p.any_mixed = true;
        }
      }
  }
}

bool prune_mixed_stages(DpProblem& p, double incumbent_s) {
  p.period_floor_s = min_feasible_period_bound(p);
  p.incumbent_s = incumbent_s;
  p.any_mixed = false;
  for (int pos = 0; pos + 1 < p.C; ++pos) {
    auto& options = p.mixed[pos];
    // Both terms grow with the stage's layers: a one-layer stage is each option's best,
    // on a layer it can hold with every device used: each position before it, and the
    // rest of its own, has a stage (a layer) first; each after it, and the rest of the
    // next one, has a stage after it.
    options.erase(std::remove_if(options.begin(), options.end(),
                                 [&](const DpMixed& x) {
                                   const int before = pos + (x.devices_a < p.devices[pos] ? 1 : 0);
                                   const int after = p.C - 2 - pos + (x.devices_b < p.devices[pos + 1] ? 1 : 0);
                                   for (int l = before; l + 1 <= p.L - after; ++l)
                                     if (!p.beaten(x.view.split(l, l + 1).slowest_s, x.view.end_s(l, l + 1))) return false;
                                   return true;
                                 }),
                  options.end());
    p.any_mixed = p.any_mixed || !options.empty();
  }
  return p.any_mixed;
}

void DpTable::build_mixed_rows(int l, Seconds cap) {
  if (!p_.any_mixed) return;
  MixedCache& cache = mixed_cache_[l];
  if (!cache.built) fill_mixed_cache(l, cache);
  // Every time grows with the stage's last layer: the rows within the cap are a prefix.
  for (size_t slot = 0; slot < cache.first.size(); ++slot) {
    mixed_at_[slot] = cache.rows.data() + cache.first[slot];
    int n = 0;
    while (n < cache.count[slot] && mixed_at_[slot][n].t_min <= cap) ++n;
    mixed_count_[slot] = n;
  }
}

void DpTable::fill_mixed_cache(int l, MixedCache& cache) const {
  cache.built = true;
  cache.first.assign(mixed_count_.size(), 0);
  cache.count.assign(mixed_count_.size(), 0);
  const int modes = static_cast<int>(p_.recompute.size());
  for (int pos = 0; pos + 1 < p_.C; ++pos) {
    const Bytes ua = p_.usable[pos], ub = p_.usable[pos + 1];
    for (size_t k = 0; k < p_.mixed[pos].size(); ++k) {
      const cost::MixedView& v = p_.mixed[pos][k].view;
      const int slot = pos * max_mixed_ + static_cast<int>(k);
      cache.first[slot] = static_cast<int>(cache.rows.size());
      for (int l1 = l + 1; l1 <= p_.L; ++l1) {
        // The training state grows with l1 and so does every replica's time, and with
        // them the split's; a part's activations need not (its share may shrink).
        if (v.static_bytes(false, 1, l, l1, Recompute::kNone) > ua ||
            v.static_bytes(true, 1, l, l1, Recompute::kNone) > ub)
          break;
        MixedRow row;
        row.t_min = std::numeric_limits<double>::infinity();
        for (int r = 0; r < modes; ++r) {
          const Recompute mode = p_.recompute[r];
          const cost::MixedSplit split = v.split(l, l1, mode);
          row.t[r] = split.slowest_s;
          row.t_min = std::min(row.t_min, row.t[r]);
          row.act_a[r] = v.activation_bytes(false, split.share_a, l, l1, mode);
          row.work_a[r] = v.static_bytes(false, split.share_a, l, l1, mode);
          row.act_b[r] = v.activation_bytes(true, split.share_b, l, l1, mode);
          row.work_b[r] = v.static_bytes(true, split.share_b, l, l1, mode);
          row.fits_one[r] = row.work_a[r] + row.act_a[r] <= ua && row.work_b[r] + row.act_b[r] <= ub;
        }
        row.e = v.end_s(l, l1);
        if (p_.beaten(row.t_min, row.e)) break;  // nor any longer one: both grow with l1
        cache.rows.push_back(row);
      }
      cache.count[slot] = static_cast<int>(cache.rows.size()) - cache.first[slot];
    }
  }
}

void DpTable::fill_mixed_heads(int l, int pos, int u, Seconds cap, double prune_at, Lane& lane) const {
  if (pos + 1 >= p_.C || p_.mixed[pos].empty()) return;
  const int D = p_.devices[pos], offset = D - u, pos1 = pos + 1, D1 = p_.devices[pos1];
  const double up = up_[at(l, pos, offset)], up_e = up_e_[at(l, pos, offset)];
  const Bytes ua = p_.usable[pos], ub = p_.usable[pos1];
  const int modes = static_cast<int>(p_.recompute.size());
  const int first_option = static_cast<int>(p_.meshes[pos].size());
  for (size_t k = 0; k < p_.mixed[pos].size(); ++k) {
    const DpMixed& x = p_.mixed[pos][k];
    if (x.devices_a != u || !p_.fits(pos, x.devices_a, x.whole_a, offset)) continue;
    const int slot = pos * max_mixed_ + static_cast<int>(k);
    const MixedRow* rows = mixed_at_[slot];
    const int len = mixed_count_[slot];
    const int u1 = D1 - x.devices_b;
    const bool inter_b = x.devices_b % p_.devices_per_node[pos1] == 0;
    const auto mesh = static_cast<std::int16_t>(first_option + static_cast<int>(k));
    for (int l1 = l + 1; l1 <= l + len; ++l1) {
      const MixedRow& row = rows[l1 - l - 1];
      auto fits = [&](int r, int n) {
        return row.work_a[r] + n * row.act_a[r] <= ua && row.work_b[r] + n * row.act_b[r] <= ub;
      };
      // Extends the entries of a downstream front through a link of time c.
      auto extend = [&](int first, int count, int att1, Seconds c, int delta) {
        for (int r = 0; r < modes; ++r) {
          const Seconds tr = row.t[r];
          if (tr > cap) continue;
          const int att = (att1 || tr == cap || c == cap) && !feasibility_only_ ? 1 : 0;
          for (int e = first; e < first + count; ++e) {
            const Entry& y = entries_[e];
            const int n = std::min(y.n + delta, p_.B);
            if (!fits(r, n)) continue;
            const double sum = y.sum + tr + 2 * c, ee = std::max(y.e, row.e);
            if (sum + up + std::max(ee, up_e) >= prune_at) continue;
            offer(lane.scratch[2 + att],
                  Entry{sum, ee, n, e, l, pos, u, mesh, static_cast<std::int8_t>(p_.recompute[r]), 1});
          }
        }
      };
      // The next stage heads position `next` at its device index next_offset: a regular
      // head through link c, or a mixed one (reaching next + 1 too) through a slower one.
      auto into = [&](int next, int next_u, Seconds c) {
        if (c > cap) return;
        const int s0 = state(l1, next, next_u, 0), s1 = state(l1, next, next_u, 1);
        const int delta = p_.delta(true, c, cap);
        extend(off_[s0], cnt_[s0], 0, c, delta);
        extend(off_[s1], cnt_[s1], 1, c, delta);
        if (next + 1 >= p_.C || p_.mixed[next].empty() || xcnt_[s0] + xcnt_[s1] == 0) return;
        const Seconds cm = std::max({c, p_.cut_s(pos, next + 1, true, l1 - 1), p_.cut_s(pos1, next + 1, true, l1 - 1)});
        if (cm > cap) return;
        const int dm = p_.delta(true, cm, cap);
        extend(xoff_[s0], xcnt_[s0], 0, cm, dm);
        extend(xoff_[s1], xcnt_[s1], 1, cm, dm);
      };
      if (u1 > 0) {
        if (l1 == p_.L) break;  // the stages after this one need layers
        into(pos1, u1, std::max(p_.cut_s(pos, pos1, true, l1 - 1), p_.cut_s(pos1, pos1, inter_b, l1 - 1)));
      } else if (l1 == p_.L) {
        if (pos1 != p_.C - 1) continue;  // later positions would be idle
        for (int r = 0; r < modes; ++r) {
          if (row.t[r] > cap || !fits(r, 1)) continue;
          offer(lane.scratch[2 + (row.t[r] == cap && !feasibility_only_ ? 1 : 0)],
                Entry{row.t[r], row.e, 1, -1, l, pos, u, mesh, static_cast<std::int8_t>(p_.recompute[r]), 1});
        }
      } else if (pos1 + 1 < p_.C) {
        const int pos2 = pos1 + 1;
        into(pos2, p_.devices[pos2], std::max(p_.cut_s(pos, pos2, true, l1 - 1), p_.cut_s(pos1, pos2, true, l1 - 1)));
      }
    }
  }
}

void DpTable::bound_mixed(int l, Seconds cap) {
  if (!p_.any_mixed) return;
  for (int pos = 0; pos + 1 < p_.C; ++pos)
    for (size_t k = 0; k < p_.mixed[pos].size(); ++k) {
      const DpMixed& x = p_.mixed[pos][k];
      const int o = p_.devices[pos] - x.devices_a;
      if (o < 0 || !p_.fits(pos, x.devices_a, x.whole_a, o)) continue;
      const double base = up_[at(l, pos, o)], base_e = up_e_[at(l, pos, o)];
      if (!std::isfinite(base)) continue;
      const int slot = pos * max_mixed_ + static_cast<int>(k);
      const MixedRow* rows = mixed_at_[slot];
      const int pos1 = pos + 1, D1 = p_.devices[pos1];
      const bool inter_b = x.devices_b % p_.devices_per_node[pos1] == 0;
      for (int i = 0; i < mixed_count_[slot]; ++i) {
        Seconds t_fits = std::numeric_limits<double>::infinity();  // the fastest mode holding one microbatch
        for (size_t r = 0; r < p_.recompute.size(); ++r)
          if (rows[i].t[r] <= cap && rows[i].fits_one[r]) t_fits = std::min(t_fits, rows[i].t[r]);
        if (t_fits > cap) continue;
        const int l1 = l + 1 + i;
        const double t = base + t_fits, e = std::max(base_e, rows[i].e);
        auto land = [&](std::vector<double>& sum, std::vector<double>& ee, int at_index) {
          sum[at_index] = std::min(sum[at_index], t);
          ee[at_index] = std::min(ee[at_index], e);
        };
        if (l1 == p_.L) {  // the pipeline ends with it
          if (x.devices_b != D1) continue;
          land(down_, down_e_, at(l1, pos1, D1));
          if (p_.require_mixed) land(downm_, downm_e_, at(l1, pos1, D1));
          continue;
        }
        // The link out of it, as a regular next head sees it (a mixed one pays more).
        Seconds c;
        int next = pos1, next_o = x.devices_b;
        if (x.devices_b < D1) {
          c = std::max(p_.cut_s(pos, pos1, true, l1 - 1), p_.cut_s(pos1, pos1, inter_b, l1 - 1));
        } else {
          if (pos1 + 1 >= p_.C) continue;
          next = pos1 + 1;
          next_o = 0;
          c = std::max(p_.cut_s(pos, next, true, l1 - 1), p_.cut_s(pos1, next, true, l1 - 1));
        }
        if (c > cap) continue;
        const int a = at(l1, next, next_o);
        xup_[a] = std::min(xup_[a], t + 2 * c);
        xup_e_[a] = std::min(xup_e_[a], e);
      }
    }
}

}  // namespace harp::planner
