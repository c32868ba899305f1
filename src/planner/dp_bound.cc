// The DP's per-layer stage figures and its upstream bound (see dp_table.h: rows_, up_).
#include <algorithm>
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
        for (int r = 0; r < modes; ++r) {
          const bool none = p_.recompute[r] == Recompute::kNone;
          row.act[r] = none ? m.view.activation_bytes(l, l1) : m.view.activation_bytes(l, l1, p_.recompute[r]);
          row.work[r] = none ? stat : stat + m.view.working_set_bytes(p_.recompute[r]);  // the static part
          if (row.t[r] <= cap && row.work[r] + row.act[r] <= usable) row.t_fits = std::min(row.t_fits, row.t[r]);
        }
        if (!std::isfinite(row.t_fits)) break;  // nor any longer stage (its memory only grows)
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
  double best = std::numeric_limits<double>::infinity();
  for (int pos = p_.allow_idle ? 0 : p_.C - 1; pos < p_.C; ++pos)
    for (int o = p_.allow_idle ? 1 : p_.devices[pos]; o <= p_.devices[pos]; ++o)
      best = std::min(best, down_[at(p_.L, pos, o)] + down_e_[at(p_.L, pos, o)]);
  return best;
}

void DpTable::bound_upstream(Seconds cap) {
  bound_cap_ = cap;
  const double inf = std::numeric_limits<double>::infinity();
  std::fill(up_.begin(), up_.end(), inf);
  std::fill(down_.begin(), down_.end(), inf);
  std::fill(up_e_.begin(), up_e_.end(), inf);
  std::fill(down_e_.begin(), down_e_.end(), inf);
  std::fill(xup_.begin(), xup_.end(), inf);
  std::fill(xup_e_.begin(), xup_e_.end(), inf);
  const int C = p_.C;
  for (int l = 0; l < p_.L; ++l) {
    // up_ at layer l from the parts that end there (down_ at l is final: stages end later
    // than they start).
    for (int pos = 0; pos < C; ++pos) {
      const int D = p_.devices[pos], dpn = p_.devices_per_node[pos];
      for (int o = 0; o < D; ++o) {
        double best = inf, best_e = inf;
        if (l == 0) {
          best = best_e = (p_.allow_idle || (pos == 0 && o == 0)) ? 0.0 : inf;
        } else {
          if (o > 0 && std::isfinite(down_[at(l, pos, o)])) {
            const Seconds c = (o % dpn == 0 ? p_.cut_inter_s : p_.cut_intra_s)[pos][l - 1];
            if (c <= cap) {
              best = down_[at(l, pos, o)] + 2 * c;
              best_e = down_e_[at(l, pos, o)];
            }
          }
          if (o == 0 || p_.allow_idle)
            for (int q = p_.allow_idle ? 0 : pos - 1; q >= 0 && q < pos; ++q) {
              if (!p_.linked[q][pos]) continue;
              const Seconds c = p_.cut_cross_s[q * C + pos][l - 1];
              if (c > cap) continue;
              double ended = inf, ended_e = inf;  // the last stage ends anywhere in q (idle) or at its end
              for (int o1 = p_.allow_idle ? 1 : p_.devices[q]; o1 <= p_.devices[q]; ++o1) {
                ended = std::min(ended, down_[at(l, q, o1)]);
                ended_e = std::min(ended_e, down_e_[at(l, q, o1)]);
              }
              best = std::min(best, ended + 2 * c);
              best_e = std::min(best_e, ended_e);
            }
        }
        up_[at(l, pos, o)] = std::min(best, xup_[at(l, pos, o)]);
        up_e_[at(l, pos, o)] = std::min(best_e, xup_e_[at(l, pos, o)]);
      }
    }
    // Stages that start at l.
    build_rows(l, cap);
    const size_t stride = static_cast<size_t>(C) * (p_.max_devices + 1);  // one layer on
    for (int pos = 0; pos < C; ++pos) {
      const int D = p_.devices[pos];
      for (size_t mi = 0; mi < p_.meshes[pos].size(); ++mi) {
        const DpMesh& m = p_.meshes[pos][mi];
        const Row* rows = rows_.data() + row_first_[pos * max_meshes_ + mi];
        const int len = row_count_[pos * max_meshes_ + mi];
        for (int o = 0; o + m.devices <= D; ++o) {
          const double base = up_[at(l, pos, o)], base_e = up_e_[at(l, pos, o)];
          if (!std::isfinite(base) || !p_.fits(pos, m, o)) continue;
          double* end = &down_[at(l + 1, pos, o + m.devices)];
          double* end_e = &down_e_[at(l + 1, pos, o + m.devices)];
          for (int k = 0; k < len; ++k) {
            const Row& row = rows[k];
            if (row.t_fits > cap) continue;
            end[k * stride] = std::min(end[k * stride], base + row.t_fits);
            end_e[k * stride] = std::min(end_e[k * stride], std::max(base_e, row.e));
          }
        }
      }
    }
    bound_mixed(l, cap);
  }
}

}  // namespace harp::planner
