// best_shares (cost/shares.h) against every composition of the samples (brute force), and
// the closed form of replicas whose time is proportional to their samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "harp/cost/shares.h"

namespace harp::cost {
namespace {

// The least slowest-replica time over every split with each replica taking >= 1 sample.
Seconds brute_force(int replicas, int samples, const std::function<Seconds(int, int)>& time) {
  Seconds best = std::numeric_limits<double>::infinity();
  std::vector<int> n(replicas, 1);
  std::function<void(int, int)> rec = [&](int d, int left) {
    if (d == replicas - 1) {
      n[d] = left;
      Seconds slowest = 0;
      for (int e = 0; e < replicas; ++e) slowest = std::max(slowest, time(e, n[e]));
      best = std::min(best, slowest);
      return;
    }
    for (int k = 1; k <= left - (replicas - 1 - d); ++k) {
      n[d] = k;
      rec(d + 1, left - k);
    }
  };
  rec(0, samples);
  return best;
}

TEST(Shares, ProportionalToSpeed) {
  // Times proportional to samples over speed: shares proportional to speed when they divide.
  auto linear = [](std::vector<double> speed) {
    return [speed](int d, int n) { return n / speed[static_cast<size_t>(d)]; };
  };
  auto a = best_shares(2, 4, linear({3, 1}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->shares, (std::vector<int>{3, 1}));
  EXPECT_DOUBLE_EQ(a->slowest_s, 1.0);
  auto b = best_shares(3, 4, linear({2, 1, 1}));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->shares, (std::vector<int>{2, 1, 1}));
  auto c = best_shares(2, 8, linear({1, 1}));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->shares, (std::vector<int>{4, 4}));
  // One fast device beside two 2x slower ones, 8 samples: 4, 2, 2 (each 4 units).
  auto d = best_shares(3, 8, linear({2, 1, 1}));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->shares, (std::vector<int>{4, 2, 2}));
  EXPECT_DOUBLE_EQ(d->slowest_s, 2.0);
  EXPECT_FALSE(best_shares(3, 2, linear({1, 1, 1})).has_value()) << "fewer samples than replicas";
}

TEST(Shares, MatchesEveryCompositionOnRandomReplicas) {
  std::mt19937 rng(5);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  int cases = 0, uneven = 0;
  for (int k = 0; k < 400; ++k) {
    const int replicas = 1 + static_cast<int>(rng() % 4), samples = replicas + static_cast<int>(rng() % 9);
    // Per replica: a fixed cost, a per-sample cost, and a sublinear or superlinear curve;
    // sometimes times tie across replicas (equal devices).
    std::vector<double> fixed(replicas), per(replicas), alpha(replicas);
    for (int d = 0; d < replicas; ++d) {
      fixed[d] = uni(0, 2);
      per[d] = rng() % 3 == 0 ? 1.0 : uni(0.2, 5);
      alpha[d] = uni(0.5, 1.5);
    }
    auto time = [&](int d, int n) { return fixed[d] + per[d] * std::pow(n, alpha[d]); };
    SCOPED_TRACE("case " + std::to_string(k));
    auto got = best_shares(replicas, samples, time);
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(static_cast<int>(got->shares.size()), replicas);
    int sum = 0;
    Seconds slowest = 0;
    for (int d = 0; d < replicas; ++d) {
      EXPECT_GE(got->shares[d], 1);
      sum += got->shares[d];
      slowest = std::max(slowest, time(d, got->shares[d]));
    }
    EXPECT_EQ(sum, samples);
    EXPECT_DOUBLE_EQ(got->slowest_s, slowest);
    EXPECT_DOUBLE_EQ(got->slowest_s, brute_force(replicas, samples, time));
    ++cases;
    uneven += *std::max_element(got->shares.begin(), got->shares.end()) -
                  *std::min_element(got->shares.begin(), got->shares.end()) >
              1;
  }
  EXPECT_GE(uneven, 100) << "the cases stopped making shares uneven";
}

}  // namespace
}  // namespace harp::cost
