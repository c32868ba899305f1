// The exact min-max split of a microbatch over replicas of different speeds (shares.h).
#include "harp/cost/shares.h"

#include <algorithm>

namespace harp::cost {

std::optional<ShareSplit> best_shares(int replicas, int samples, const std::function<Seconds(int, int)>& time) {
  if (replicas < 1 || samples < replicas) return std::nullopt;
  const int most = samples - replicas + 1;  // what one replica can take, the others one each
  std::vector<std::vector<Seconds>> t(replicas, std::vector<Seconds>(most + 1, 0));
  std::vector<Seconds> candidates;
  for (int d = 0; d < replicas; ++d)
    for (int n = 1; n <= most; ++n) candidates.push_back(t[d][n] = time(d, n));
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  // How many samples each replica runs within T (0: not even one).
  auto within = [&](Seconds T, std::vector<int>* caps) {
    long long total = 0;
    for (int d = 0; d < replicas; ++d) {
      const auto& row = t[d];
      const int cap = static_cast<int>(std::upper_bound(row.begin() + 1, row.end(), T) - (row.begin() + 1));
      if (cap == 0) return false;
      if (caps) (*caps)[d] = cap;
      total += cap;
    }
    return total >= samples;
  };
  // The least feasible candidate: the largest one is (every replica within its own most).
  size_t lo = 0, hi = candidates.size() - 1;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (within(candidates[mid], nullptr))
      hi = mid;
    else
      lo = mid + 1;
  }
  ShareSplit split;
  split.shares.assign(replicas, 0);
  within(candidates[lo], &split.shares);
  long long surplus = -static_cast<long long>(samples);
  for (int n : split.shares) surplus += n;
  for (int d = replicas - 1; d >= 0 && surplus > 0; --d) {
    const int give = static_cast<int>(std::min<long long>(surplus, split.shares[d] - 1));
    split.shares[d] -= give;
    surplus -= give;
  }
  for (int d = 0; d < replicas; ++d) split.slowest_s = std::max(split.slowest_s, t[d][split.shares[d]]);
  return split;
}

}  // namespace harp::cost
