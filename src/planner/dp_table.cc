// The per-cap DP of the exact search (see dp_table.h for the state and its invariants).
#include "dp_table.h"

#include <algorithm>
#include <atomic>
#include <cmath>

namespace harp::planner {

DpTable::DpTable(const DpProblem& problem, int threads)
    : p_(problem), lanes_(std::max(1, threads)), pool_(static_cast<int>(lanes_.size())) {
  const size_t states = static_cast<size_t>(p_.L) * p_.C * (p_.max_devices + 1) * 2;
  off_.assign(states, 0);
  cnt_.assign(states, 0);
  least_.assign(states, Least{});
  mleast_.assign(static_cast<size_t>(p_.L) * p_.C * 2, Least{});
  moff_.assign(static_cast<size_t>(p_.L) * p_.C * 2, 0);
  mcnt_.assign(static_cast<size_t>(p_.L) * p_.C * 2, 0);
  for (int pos = 0; pos < p_.C; ++pos) {
    job_first_.push_back(static_cast<int>(jobs_.size()));
    for (int u = 1; u <= p_.devices[pos]; ++u) jobs_.emplace_back(pos, u);
  }
  where_.resize(jobs_.size());
  up_.assign(static_cast<size_t>(p_.L + 1) * p_.C * (p_.max_devices + 1), 0.0);
  down_.assign(up_.size(), 0.0);
  up_e_.assign(up_.size(), 0.0);
  down_e_.assign(up_.size(), 0.0);
  xup_.assign(up_.size(), 0.0);
  xup_e_.assign(up_.size(), 0.0);
  next_filled_.assign(static_cast<size_t>(p_.L + 1) * p_.C, p_.L);
  next_state_.assign(up_.size(), p_.L);
  if (p_.require_mixed)
    for (auto* v : {&upm_, &downm_, &upm_e_, &downm_e_}) v->assign(up_.size(), 0.0);
  for (const auto& meshes : p_.meshes) max_meshes_ = std::max(max_meshes_, static_cast<int>(meshes.size()));
  row_first_.assign(static_cast<size_t>(p_.C) * max_meshes_, 0);
  row_count_.assign(row_first_.size(), 0);
  for (const auto& mixed : p_.mixed) max_mixed_ = std::max(max_mixed_, static_cast<int>(mixed.size()));
  mixed_at_.assign(static_cast<size_t>(p_.C) * max_mixed_, nullptr);
  mixed_count_.assign(mixed_at_.size(), 0);
  mixed_cache_.resize(p_.any_mixed ? p_.L : 0);
  xoff_.assign(states, 0);
  xcnt_.assign(states, 0);
  xleast_.assign(states, Least{});
}

DpTable::Least DpTable::least_of(const Entry* first, size_t count) {
  const double inf = std::numeric_limits<double>::infinity();
  Least least{inf, inf, std::numeric_limits<int>::max()};
  for (const Entry* x = first; x < first + count; ++x) {
    least.sum = std::min(least.sum, x->sum);
    least.e = std::min(least.e, x->e);
    least.n = std::min(least.n, x->n);
  }
  return least;
}

// x dominates y when no upstream completion can make y better: the upstream part adds
// the same amount to both sums and replaces e by max(e, E) for some E >= 0, so x must
// not lose for E = 0 (sum + e) nor for E large (sum), and x's launch count must not be
// larger (more memory upstream). Nor may x lack the mixed stage y has (require_mixed:
// x's completions are then held to a stronger bound). Feasibility probes compare the
// launch count only.
bool DpTable::dominates(const Entry& x, const Entry& y, bool feasibility_only) {
  if (x.n > y.n || x.mixed < y.mixed) return false;
  return feasibility_only || (x.sum <= y.sum && x.sum + x.e <= y.sum + y.e);
}

void DpTable::offer(std::vector<Entry>& front, const Entry& c) const {
  for (const Entry& x : front)
    if (dominates(x, c, feasibility_only_)) return;
  front.erase(std::remove_if(front.begin(), front.end(), [&](const Entry& x) { return dominates(c, x, feasibility_only_); }),
              front.end());
  front.push_back(c);
}

template <bool kMulti>
void DpTable::fill_state(int l, int pos, int u, Seconds cap, double prune_at, Lane& lane) const {
  std::vector<Entry>* scratch = lane.scratch;
  for (int f = 0; f < 4; ++f) scratch[f].clear();
  const int D = p_.devices[pos];
  const int offset = D - u;
  const Bytes usable = p_.usable[pos];
  const auto& meshes = p_.meshes[pos];
  const double up = up_[at(l, pos, offset)], up_e = up_e_[at(l, pos, offset)];
  // The bound for entries without a mixed stage (require_mixed: an upstream part has one).
  const double upm = p_.require_mixed ? upm_[at(l, pos, offset)] : up;
  const double upm_e = p_.require_mixed ? upm_e_[at(l, pos, offset)] : up_e;
  if (!std::isfinite(up)) {  // no upstream part reaches this state
    lane.counts.insert(lane.counts.end(), {0, 0, 0, 0});
    return;
  }
  const int modes = kMulti ? static_cast<int>(p_.recompute.size()) : 1;
  auto mode_of = [&](int r) { return static_cast<std::int8_t>(p_.recompute[r]); };
  for (int mi = 0; mi < static_cast<int>(meshes.size()); ++mi) {
    const DpMesh& m = meshes[mi];
    if (m.devices > u || !p_.fits(pos, m, offset)) continue;
    const int u1 = u - m.devices;
    const bool same_crosses_nodes = (D - u1) % p_.devices_per_node[pos] == 0;
    const std::vector<Seconds>& same_cut = same_crosses_nodes ? p_.cut_inter_s[pos] : p_.cut_intra_s[pos];
    const Row* rows = rows_.data() + row_first_[pos * max_meshes_ + mi];
    const int len = row_count_[pos * max_meshes_ + mi];
    // The next stage heads this position on its u1 devices left, or the next position
    // on all of them (every device used; after the last position the model ends): this
    // stage ends only where that state has entries, or at the model's end.
    const int next_pos = u1 > 0 ? pos : (p_.allow_idle ? -1 : pos + 1);
    const int next_u = u1 > 0 ? u1 : (next_pos >= 0 && next_pos < p_.C ? p_.devices[next_pos] : 0);
    auto next_end = [&](int l1) {
      if (next_pos < 0 || l1 > p_.L) return l1;
      return next_pos == p_.C ? p_.L : next_state_[at(l1, next_pos, next_u)];
    };
    for (int l1 = next_end(l + 1); l1 <= l + len; l1 = next_end(l1 + 1)) {
      const Row& row = rows[l1 - l - 1];  // within the cap and the static memory
      // Extends every entry of a downstream front through a link of time c, once per mode
      // that fits (the fronts keep what no other entry dominates: a slower mode survives
      // only where it is the one that fits the memory or attains the cap).
      auto extend = [&](int first, int count, const Least& least, int att1, Seconds c, int delta) {
        if (count == 0) return;
        const double e_head = row.e;
        for (int r = 0; r < modes; ++r) {
          // Copies, not the row's arrays: the compiler keeps them in registers across offer().
          const Seconds tr = row.t[r];
          const Bytes ar = row.act[r], sr = row.work[r];
          if (tr > cap) continue;
          // No entry of the front can pass the memory or the bound test: skip it whole.
          if (sr + std::min(least.n + delta, p_.B) * ar > usable) continue;
          if (least.sum + tr + 2 * c + up + std::max(std::max(least.e, e_head), up_e) >= prune_at) continue;
          const int att = (att1 || tr == cap || c == cap) && !feasibility_only_ ? 1 : 0;
          const std::int8_t mode = mode_of(r);
          for (int k = first; k < first + count; ++k) {
            const Entry& x = entries_[k];
            const int n = std::min(x.n + delta, p_.B);
            if (sr + n * ar > usable) continue;
            const double sum = x.sum + tr + 2 * c, e = std::max(x.e, e_head);
            if (sum + (x.mixed ? up : upm) + std::max(e, x.mixed ? up_e : upm_e) >= prune_at) continue;
            offer(scratch[att], Entry{sum, e, n, k, l, pos, u, static_cast<std::int16_t>(mi), mode, x.mixed});
          }
        }
      };
      if (u1 > 0) {
        if (l1 == p_.L) break;  // the stages after this one need layers
        const int s0 = state(l1, pos, u1, 0), s1 = state(l1, pos, u1, 1);
        if (cnt_[s0] + cnt_[s1] + xcnt_[s0] + xcnt_[s1] == 0) continue;
        const Seconds c = same_cut[l1 - 1];
        if (c > cap) continue;
        const int delta = p_.delta(same_crosses_nodes, c, cap);
        extend(off_[s0], cnt_[s0], least_[s0], 0, c, delta);
        extend(off_[s1], cnt_[s1], least_[s1], 1, c, delta);
        if (xcnt_[s0] + xcnt_[s1] > 0) {  // a mixed head there also takes from the next position
          const Seconds cm = std::max(c, p_.cut_s(pos, pos + 1, true, l1 - 1));
          if (cm <= cap) {
            const int dm = p_.delta(true, cm, cap);
            extend(xoff_[s0], xcnt_[s0], xleast_[s0], 0, cm, dm);
            extend(xoff_[s1], xcnt_[s1], xleast_[s1], 1, cm, dm);
          }
        }
      } else if (l1 == p_.L) {
        if (!p_.allow_idle && pos != p_.C - 1) continue;  // later subclusters would be idle
        for (int r = 0; r < modes; ++r) {
          if (row.t[r] > cap || row.work[r] + row.act[r] > usable) continue;
          offer(scratch[row.t[r] == cap && !feasibility_only_ ? 1 : 0],
                Entry{row.t[r], row.e, 1, -1, l, pos, u, static_cast<std::int16_t>(mi), mode_of(r), 0});
        }
      } else {
        for (int pos1 = pos + 1; pos1 < p_.C; ++pos1) {
          if (p_.linked[pos][pos1]) {
            const int m0 = merged(l1, pos1, 0), m1 = merged(l1, pos1, 1);
            if (mcnt_[m0] + mcnt_[m1] > 0) {
              const Seconds c = p_.cut_cross_s[pos * p_.C + pos1][l1 - 1];
              if (c <= cap) {
                const int delta = p_.delta(true, c, cap);
                extend(moff_[m0], mcnt_[m0], mleast_[m0], 0, c, delta);
                extend(moff_[m1], mcnt_[m1], mleast_[m1], 1, c, delta);
              }
            }
            // A mixed head of pos1 (every device used: it starts at device 0).
            const int x0 = state(l1, pos1, p_.devices[pos1], 0), x1 = state(l1, pos1, p_.devices[pos1], 1);
            if (!p_.allow_idle && xcnt_[x0] + xcnt_[x1] > 0) {
              const Seconds cm = std::max(p_.cut_cross_s[pos * p_.C + pos1][l1 - 1], p_.cut_s(pos, pos1 + 1, true, l1 - 1));
              if (cm <= cap) {
                const int dm = p_.delta(true, cm, cap);
                extend(xoff_[x0], xcnt_[x0], xleast_[x0], 0, cm, dm);
                extend(xoff_[x1], xcnt_[x1], xleast_[x1], 1, cm, dm);
              }
            }
          }
          if (!p_.allow_idle) break;  // only the next subcluster; skipping leaves one idle
        }
      }
    }
  }
  fill_mixed_heads(l, pos, u, cap, prune_at, lane);
  for (int f = 0; f < 4; ++f) {
    lane.counts.push_back(static_cast<int>(scratch[f].size()));
    lane.out.insert(lane.out.end(), scratch[f].begin(), scratch[f].end());
  }
  if (!scratch[0].empty() || !scratch[1].empty() || !scratch[2].empty() || !scratch[3].empty()) ++lane.states;
}

void DpTable::fill_layer(int l, Seconds cap, double prune_at) {
  // Threads pay off on wide layers only (waking one costs microseconds). The states'
  // work is uneven (a mesh fits only aligned offsets), so lanes take the next job as
  // they finish and note which job each front belongs to.
  build_rows(l, cap);
  // Only the positions where a stage can reach a successor with entries (the others'
  // fronts stay empty: run() zeroed their counts).
  live_jobs_.clear();
  for (int pos = 0; pos < p_.C; ++pos)
    if (may_have_entries(l, pos))
      for (int j = job_first_[pos]; j < job_first_[pos] + p_.devices[pos]; ++j) live_jobs_.push_back(j);
  const int T = live_jobs_.size() >= 64 ? static_cast<int>(lanes_.size()) : 1;
  std::atomic<size_t> next{0};
  auto work = [&](int t) {
    Lane& lane = lanes_[t];
    lane.out.clear();
    lane.counts.clear();
    lane.jobs.clear();
    lane.states = 0;
    for (size_t k = next++; k < live_jobs_.size(); k = next++) {
      const int j = live_jobs_[k];
      lane.jobs.push_back(j);
      if (p_.recompute.size() > 1)
        fill_state<true>(l, jobs_[j].first, jobs_[j].second, cap, prune_at, lane);
      else
        fill_state<false>(l, jobs_[j].first, jobs_[j].second, cap, prune_at, lane);
    }
  };
  if (T == 1)
    work(0);
  else
    pool_.run(work);
  // Append in job order, whatever lane filled a job: the same table for any thread count.
  for (int t = 0; t < T; ++t) {
    size_t at = 0;
    for (size_t i = 0; i < lanes_[t].jobs.size(); ++i) {
      where_[lanes_[t].jobs[i]] = {t, at, static_cast<int>(i)};
      for (int f = 0; f < 4; ++f) at += static_cast<size_t>(lanes_[t].counts[4 * i + f]);
    }
    states_ += lanes_[t].states;
  }
  for (const int j : live_jobs_) {
    const Lane& lane = lanes_[where_[j].lane];
    size_t from = where_[j].first;
    for (int f = 0; f < 4; ++f) {
      const int s = state(l, jobs_[j].first, jobs_[j].second, f % 2);
      const int n = lane.counts[4 * where_[j].index + f];
      (f < 2 ? off_ : xoff_)[s] = static_cast<int>(entries_.size());
      (f < 2 ? cnt_ : xcnt_)[s] = n;
      (f < 2 ? least_ : xleast_)[s] = least_of(lane.out.data() + from, static_cast<size_t>(n));
      entries_.insert(entries_.end(), lane.out.begin() + static_cast<std::ptrdiff_t>(from),
                      lane.out.begin() + static_cast<std::ptrdiff_t>(from + n));
      from += static_cast<size_t>(n);
    }
  }
}

bool DpTable::may_have_entries(int l, int pos) const {
  if (p_.allow_idle) return true;
  const int L = p_.L;
  // Whether position q has entries at some layer in (l, reach], before the model's end.
  auto reaches = [&](int q, int reach) {
    return q < p_.C && next_filled(l + 1, q) < L && next_filled(l + 1, q) <= reach;
  };
  int reach = l;  // the farthest a regular stage starting here ends
  for (size_t mi = 0; mi < p_.meshes[pos].size(); ++mi) reach = std::max(reach, l + row_count_[pos * max_meshes_ + mi]);
  // Next: this position (devices left), the next one (every device used), or the end.
  if (reach > l && (reaches(pos, reach) || reaches(pos + 1, reach) || (pos == p_.C - 1 && reach >= L))) return true;
  if (!p_.any_mixed || pos + 1 >= p_.C) return false;
  int xreach = l;  // the same for the mixed stages that start here, heading pos + 1 or pos + 2 next
  for (size_t k = 0; k < p_.mixed[pos].size(); ++k) xreach = std::max(xreach, l + mixed_count_[pos * max_mixed_ + k]);
  return xreach > l && (reaches(pos + 1, xreach) || reaches(pos + 2, xreach) || (pos + 1 == p_.C - 1 && xreach >= L));
}

void DpTable::fill_merged(int l, int pos) {
  const int D = p_.devices[pos];
  for (int att = 0; att < 2; ++att) {
    const int mg = merged(l, pos, att);
    if (!p_.allow_idle) {
      // Every device of the subcluster is used: only the full state leaves it.
      const int s = state(l, pos, D, att);
      moff_[mg] = off_[s];
      mcnt_[mg] = cnt_[s];
      mleast_[mg] = least_[s];
      continue;
    }
    scratch_[0].clear();
    for (int u = 1; u <= D; ++u) {
      const int s = state(l, pos, u, att);
      for (int k = off_[s]; k < off_[s] + cnt_[s]; ++k) offer(scratch_[0], entries_[k]);
    }
    moff_[mg] = static_cast<int>(entries_.size());
    mcnt_[mg] = static_cast<int>(scratch_[0].size());
    mleast_[mg] = least_of(scratch_[0].data(), scratch_[0].size());
    entries_.insert(entries_.end(), scratch_[0].begin(), scratch_[0].end());
  }
}

DpOutcome DpTable::run(Seconds cap, double prune_at) {
  entries_.clear();
  states_ = 0;
  std::fill(cnt_.begin(), cnt_.end(), 0);
  std::fill(mcnt_.begin(), mcnt_.end(), 0);
  std::fill(xcnt_.begin(), xcnt_.end(), 0);
  if (cap != bound_cap_) bound_upstream(cap);
  for (int pos = 0; pos < p_.C; ++pos) {
    next_filled_[p_.L * p_.C + pos] = p_.L;
    for (int u = 1; u <= p_.devices[pos]; ++u) next_state_[at(p_.L, pos, u)] = p_.L;
  }
  for (int l = p_.L - 1; l >= 0; --l) {
    fill_layer(l, cap, prune_at);
    for (int pos = 0; pos < p_.C; ++pos) {
      fill_merged(l, pos);
      bool any = false;
      for (int u = 1; u <= p_.devices[pos]; ++u) {
        const bool filled = cnt_[state(l, pos, u, 0)] + cnt_[state(l, pos, u, 1)] + xcnt_[state(l, pos, u, 0)] +
                                xcnt_[state(l, pos, u, 1)] > 0;
        next_state_[at(l, pos, u)] = filled ? l : next_state_[at(l + 1, pos, u)];
        any = any || filled;
      }
      next_filled_[l * p_.C + pos] = any ? l : next_filled_[(l + 1) * p_.C + pos];
    }
  }
  DpOutcome out;
  auto consider = [&](int first, int count, int att) {
    for (int k = first; k < first + count; ++k) {
      const double v = entries_[k].sum + entries_[k].e;
      if (v < out.relaxed) {
        out.relaxed = v;
        out.relaxed_entry = k;
      }
      if (att == 1 && v < out.exact) {
        out.exact = v;
        out.exact_entry = k;
      }
    }
  };
  for (int att = 0; att < 2; ++att) {
    if (!p_.allow_idle) {
      const int s = state(0, 0, p_.devices[0], att);
      consider(off_[s], cnt_[s], att);
      consider(xoff_[s], xcnt_[s], att);
    } else {
      for (int pos = 0; pos < p_.C; ++pos) consider(moff_[merged(0, pos, att)], mcnt_[merged(0, pos, att)], att);
    }
  }
  out.states = states_;
  out.entries = static_cast<long long>(entries_.size());
  return out;
}

int DpTable::feasible(Seconds cap) {
  feasibility_only_ = true;
  DpOutcome out = run(cap);
  feasibility_only_ = false;
  return out.relaxed_entry;
}

std::vector<Placement> DpTable::placements(int entry) const {
  std::vector<Placement> out;
  for (int k = entry; k >= 0; k = entries_[k].prev) {
    const Entry& x = entries_[k];
    const int dpn = p_.devices_per_node[x.pos];
    const int offset = p_.devices[x.pos] - x.u;
    Placement pl;
    pl.subcluster = p_.order[x.pos];
    pl.first_node = offset / dpn;
    pl.first_local = offset % dpn;
    pl.first_layer = x.l;
    pl.recompute = static_cast<Recompute>(x.recompute);
    const int meshes = static_cast<int>(p_.meshes[x.pos].size());
    if (x.mesh < meshes) {
      const DpMesh& m = p_.meshes[x.pos][x.mesh];
      pl.devices = m.devices;
      pl.dp = m.dp;
      pl.tp = m.tp;
      pl.zero = m.zero;
    } else {
      const DpMixed& mx = p_.mixed[x.pos][x.mesh - meshes];
      const cost::MixedGroup& g = mx.view.group();
      pl.devices = mx.devices_a;
      pl.dp = g.dp_a;
      pl.tp = g.tp;
      pl.second_subcluster = g.sub_b;
      pl.second_devices = mx.devices_b;
      pl.second_dp = g.dp_b;
    }
    pl.last_layer = x.prev >= 0 ? entries_[x.prev].l : p_.L;
    out.push_back(pl);
  }
  return out;
}

}  // namespace harp::planner
