#include "harp/runtime/io/drift.h"

#include <algorithm>
#include <cmath>

namespace harp::runtime {
namespace {

double median_of_last(const std::vector<double>& v, int n) {
  std::vector<double> w(v.end() - std::min<std::ptrdiff_t>(n, static_cast<std::ptrdiff_t>(v.size())), v.end());
  std::sort(w.begin(), w.end());
  const size_t k = w.size();
  return k % 2 == 1 ? w[k / 2] : (w[k / 2 - 1] + w[k / 2]) / 2;
}

}  // namespace

std::optional<Drift> DriftDetector::observe(int step, const std::vector<double>& compute_s,
                                            const std::vector<double>& link_s) {
  const size_t S = static_cast<size_t>(stages_);
  if (config_.threshold <= 1 || compute_s.size() != S || (!link_s.empty() && link_s.size() + S != history_.size()))
    return std::nullopt;
  if (seen_++ == 0) return std::nullopt;  // the first step holds the warm-up
  const int w = std::max(1, config_.window);
  for (size_t s = 0; s < history_.size(); ++s)
    history_[s].push_back(s < S ? compute_s[s] : link_s.empty() ? 0.0 : link_s[s - S]);
  if (static_cast<int>(history_[0].size()) < w) return std::nullopt;
  if (baseline_.empty()) {
    for (const auto& h : history_) baseline_.push_back(median_of_last(h, w));
    return std::nullopt;
  }
  // The pipeline's period is bounded by its slowest stage or link (the closed form's
  // P = max(max t_i, max c_i)): a change of that bound changes the iteration. Below, "stage"
  // is either.
  std::vector<double> now(history_.size());
  double period_now = 0, period_base = 0;
  for (size_t s = 0; s < history_.size(); ++s) {
    now[s] = median_of_last(history_[s], w);
    period_now = std::max(period_now, now[s]);
    period_base = std::max(period_base, baseline_[s]);
  }
  // When the window's median crosses, about half its steps are past the change, and the
  // median is the least changed of them (a 2x slowdown read as 1.71x): the level reported
  // and kept as the new baseline is the median of the window's newer half.
  const auto level = [&](size_t s) { return median_of_last(history_[s], (w + 1) / 2); };
  if (period_base <= 0) return std::nullopt;
  // A stage counts when it is or becomes at least half the bound: one whose change a
  // re-plan can use (a stage at the bound that recovers under a new plan leaves the bound
  // to another stage, yet the old plan would be faster again). A stage far below the
  // bound swinging (a 0.5 ms stage measured at 0.75 beside a 3 ms one) is not a drift.
  const auto beyond = [&](double r) { return r > config_.threshold || r < 1 / config_.threshold; };
  bool any = beyond(period_now / period_base);
  std::optional<Drift> worst;
  std::vector<double> ratios(history_.size(), 1.0);
  for (size_t s = 0; s < history_.size(); ++s) {
    if (baseline_[s] <= 0) continue;
    if (baseline_[s] < period_base / 2 && now[s] < period_now / 2) continue;  // 1: not judged
    any = any || beyond(now[s] / baseline_[s]);
    const double ratio = ratios[s] = level(s) / baseline_[s];
    // The stage that moved the most names the drift.
    if (!worst || std::abs(std::log(ratio)) > std::abs(std::log(worst->ratio))) {
      const bool link = s >= S;
      worst = Drift{step, link ? -1 : static_cast<int>(s), link ? static_cast<int>(s - S) : -1, ratio, baseline_[s],
                    level(s), {}, {}, {}, {}, {}, {}};
    }
  }
  if (!any || !worst) return std::nullopt;
  auto split = [&](const std::vector<double>& v, std::vector<double>* stages, std::vector<double>* links) {
    stages->assign(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(S));
    if (!link_s.empty()) links->assign(v.begin() + static_cast<std::ptrdiff_t>(S), v.end());
  };
  split(ratios, &worst->stage_ratios, &worst->link_ratios);
  split(baseline_, &worst->stage_baseline_s, &worst->link_baseline_s);
  for (size_t s = 0; s < history_.size(); ++s) baseline_[s] = level(s);
  // The new level: reported once per change.
  split(baseline_, &worst->stage_measured_s, &worst->link_measured_s);
  return worst;
}

}  // namespace harp::runtime
