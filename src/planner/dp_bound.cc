// The DP's per-layer stage figures and its upstream bound (see dp_table.h: rows_, up_).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "dp_table.h"

namespace harp::planner {

void DpTable::build_rows(int l, Seconds cap) {
  rows_.clear();
  const int modes = static_cast<int>(p_.recompute.size());
  for (int pos = 0; pos < p_.C; ++pos) {
    const Bytes usable = p_.usable[pos];
    for (size_t mi = 0; mi < p_.meshes[pos].size(); ++mi) {
      const DpMesh& m = p_.meshes[pos][mi];
      row_first_[pos * max_meshes_ + mi] = static_cast<int>(rows_.size());
      for (int l1 = l + 1; l1 <= p_.L; ++l1) {
        Row row;
        row.t_min = row.t_fits = std::numeric_limits<double>::infinity();
        for (int r = 0; r < modes; ++r) {
          row.t[r] = m.view.compute_s(l, l1, p_.recompute[r]);
          row.t_min = std::min(row.t_min, row.t[r]);
        }
        if (row.t_min > cap) break;  // every mode's time grows with l1
        const Bytes stat = m.view.static_bytes(l, l1);
        if (stat > usable) break;
        // Less the output it holds, a stage's memory only grows with l1: when no mode fits
        // even without it, no longer stage does either.
        const Bytes held = m.view.held_bytes(l, l1);
        bool grows_past = true;
        for (int r = 0; r < modes; ++r) {
          row.act[r] = m.view.activation_bytes(l, l1, p_.recompute[r]);
          row.work[r] = stat + m.view.working_set_bytes(l, l1, p_.recompute[r]);  // the static part
          if (row.t[r] <= cap && row.work[r] + row.act[r] <= usable) row.t_fits = std::min(row.t_fits, row.t[r]);
          if (row.t[r] <= cap && row.work[r] + row.act[r] - held <= usable) grows_past = false;
        }
        if (grows_past) break;
        row.e = m.view.end_s(l, l1);
        rows_.push_back(row);
      }
      row_count_[pos * max_meshes_ + mi] = static_cast<int>(rows_.size()) - row_first_[pos * max_meshes_ + mi];
    }
  }
  build_mixed_rows(l, cap);
}

double DpTable::lower_bound(Seconds cap) {
  if (cap != bound_cap_) bound_upstream(cap);
  // With require_mixed only the plans holding a mixed stage matter.
  const std::vector<double>& down = p_.require_mixed ? downm_ : down_;
  const std::vector<double>& down_e = p_.require_mixed ? downm_e_ : down_e_;
  double best = std::numeric_limits<double>::infinity();
  for (int pos = p_.allow_idle ? 0 : p_.C - 1; pos < p_.C; ++pos)
    for (int o = p_.allow_idle ? 1 : p_.devices[pos]; o <= p_.devices[pos]; ++o)
      best = std::min(best, down[at(p_.L, pos, o)] + down_e[at(p_.L, pos, o)]);
  return best;
}

void DpTable::bound_upstream(Seconds cap) {
  bound_cap_ = cap;
  const double inf = std::numeric_limits<double>::infinity();
  for (auto* v : {&up_, &down_, &up_e_, &down_e_, &xup_, &xup_e_, &upm_, &downm_, &upm_e_, &downm_e_})
    std::fill(v->begin(), v->end(), inf);
  const int C = p_.C;
  // The parts of either kind (every part; require_mixed: those holding a mixed stage).
  struct Kind {
    std::vector<double> &up, &up_e, &down, &down_e;
  };
  std::vector<Kind> kinds = {{up_, up_e_, down_, down_e_}};
  if (p_.require_mixed) kinds.push_back({upm_, upm_e_, downm_, downm_e_});
  // Per layer, each position's up_ (from down_ at l, final: stages end later than they
  // start) and then the stages that start there on it (writing its own rows of down_
  // further on): positions are independent, so they go to the lanes on wide problems.
  const int lanes = jobs_.size() >= 1024 ? pool_.lanes() : 1;
  if (p_.any_mixed && !mixed_cache_.empty() && !mixed_cache_[0].built) {
    // The mixed stages' rows of every start layer (built once, whatever the cap) on the
    // lanes: each layer's are its own.
    std::atomic<int> next{0};
    pool_.run([&](int) {
      for (int l = next++; l < p_.L; l = next++) fill_mixed_cache(l, mixed_cache_[l]);
    });
  }
  for (int l = 0; l < p_.L; ++l) {
    build_rows(l, cap);
    std::atomic<int> next{0};
    auto work = [&](int) {
      for (int pos = next++; pos < C; pos = next++) {
        const int D = p_.devices[pos], dpn = p_.devices_per_node[pos];
        for (int o = 0; o < D; ++o)
          for (size_t k = 0; k < kinds.size(); ++k) {
            const Kind& kind = kinds[k];
            double best = inf, best_e = inf;
            if (l == 0) {
              // The empty part: it holds no mixed stage.
              if (k == 0) best = best_e = (p_.allow_idle || (pos == 0 && o == 0)) ? 0.0 : inf;
            } else {
              if (o > 0 && std::isfinite(kind.down[at(l, pos, o)])) {
                const Seconds c = (o % dpn == 0 ? p_.cut_inter_s : p_.cut_intra_s)[pos][l - 1];
                if (c <= cap) {
                  best = kind.down[at(l, pos, o)] + 2 * c;
                  best_e = kind.down_e[at(l, pos, o)];
                }
              }
              if (o == 0 || p_.allow_idle)
                for (int q = p_.allow_idle ? 0 : pos - 1; q >= 0 && q < pos; ++q) {
                  if (!p_.linked[q][pos]) continue;
                  const Seconds c = p_.cut_cross_s[q * C + pos][l - 1];
                  if (c > cap) continue;
                  double ended = inf, ended_e = inf;  // the last stage ends anywhere in q (idle) or at its end
                  for (int o1 = p_.allow_idle ? 1 : p_.devices[q]; o1 <= p_.devices[q]; ++o1) {
                    ended = std::min(ended, kind.down[at(l, q, o1)]);
                    ended_e = std::min(ended_e, kind.down_e[at(l, q, o1)]);
                  }
                  best = std::min(best, ended + 2 * c);
                  best_e = std::min(best_e, ended_e);
                }
            }
            // The parts ending with a mixed stage are of both kinds.
            kind.up[at(l, pos, o)] = std::min(best, xup_[at(l, pos, o)]);
            kind.up_e[at(l, pos, o)] = std::min(best_e, xup_e_[at(l, pos, o)]);
          }
        // Stages that start at l on pos.
        const size_t stride = static_cast<size_t>(at(1, 0, 0) - at(0, 0, 0));  // one layer on
        for (size_t mi = 0; mi < p_.meshes[pos].size(); ++mi) {
          const DpMesh& m = p_.meshes[pos][mi];
          const Row* rows = rows_.data() + row_first_[pos * max_meshes_ + mi];
          const int len = row_count_[pos * max_meshes_ + mi];
          for (int o = 0; o + m.devices <= D; ++o) {
            if (!p_.fits(pos, m, o)) continue;
            for (const Kind& kind : kinds) {
              const double base = kind.up[at(l, pos, o)], base_e = kind.up_e[at(l, pos, o)];
              if (!std::isfinite(base)) continue;
              double* end = &kind.down[at(l + 1, pos, o + m.devices)];
              double* end_e = &kind.down_e[at(l + 1, pos, o + m.devices)];
              for (int k = 0; k < len; ++k) {
                const Row& row = rows[k];
                if (row.t_fits > cap) continue;
                end[k * stride] = std::min(end[k * stride], base + row.t_fits);
                end_e[k * stride] = std::min(end_e[k * stride], std::max(base_e, row.e));
              }
            }
          }
        }
      }
    };
    if (lanes == 1)
      work(0);
    else
      pool_.run(work);
    bound_mixed(l, cap);
  }
}

}  // namespace harp::planner
