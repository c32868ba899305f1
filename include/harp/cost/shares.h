// Uneven data-parallel shares (plan::Stage::shares): how many samples of each
// microbatch each replica of a stage takes when its replicas are of different speeds,
// as Sailor, FlashFlex and Cephalo give each device a batch share by its speed.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "harp/common/units.h"

namespace harp::cost {

struct ShareSplit {
  std::vector<int> shares;  // per replica, each >= 1, summing to the samples split
  Seconds slowest_s = 0;    // the slowest replica's time: the stage's
};

// Splits `samples` over `replicas` so that the slowest replica is as fast as it can be:
// `time(d, n)` is replica d's time for n samples (1 <= n), non-decreasing in n. Every
// replica takes at least one sample. Exact: the least T over every replica's times such
// that the replicas can take every sample within it (each as many as it can run within
// T), then the surplus given back from the last replicas. nullopt when samples < replicas.
// O(R S log(R S)) calls of `time` at most.
std::optional<ShareSplit> best_shares(int replicas, int samples, const std::function<Seconds(int, int)>& time);

}  // namespace harp::cost
