// Random small planning problems shared by the planner's oracle tests (the exact search
// against the brute force; the schedule choice against the joint brute force).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner_test_util.h"

namespace harp::planner::testutil {

struct RandomCase {
  std::string cluster_yaml;
  std::vector<StageCosts::LayerBytes> layers;
  Times times;
  int microbatch_size = 1;
  SearchOptions options;
  cost::CostConfig config;
};

// Everything needed to rebuild a case by hand (or rerun it from its seed).
std::string describe_case(const RandomCase& rc);

// Sizes are bounded so that the brute force stays fast: at most 3 subclusters of 1-2
// nodes x 1-4 devices (or 3 nodes x 1-2) and 2-7 layers. Each case draws a regime, so
// that every group sees roomy problems, problems where memory binds, slow cross links
// (δ = 2 or 3, whose extra launch counts then meet the memory limit), and both at once.
// `interplay_only`: slow links with tight memory only; `recompute`: blocks, kept inputs
// and attention scores, with the stages' recomputation modes searched; `zero`: sharded
// optimizer state, forced or chosen per stage; `mixed`: mixed stages searched (times for
// every sample count, every device used, subclusters of different device types).
RandomCase make_random_case(std::uint32_t seed, bool interplay_only, bool recompute, bool zero = false,
                            bool mixed = false);

}  // namespace harp::planner::testutil
