// HARP's launch counts (the δ rule) against standard 1F1B in the simulator: the
// documented slow-link case by hand, a case where the δ rule loses, and a seeded sweep
// over the region where it never lost in our searches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "harp/plan/closed_form.h"
#include "sim_test_util.h"

namespace harp::sim {
namespace {

using testing::ns;

std::vector<int> delta_counts(const plan::Plan& p) {
  return plan::delta_rule_launch_counts(p, plan::closed_form(p).period_s);
}
std::vector<int> one_f_one_b_counts(const plan::Plan& p) {
  return plan::standard_launch_counts(p.num_stages(), p.microbatches, plan::ScheduleKind::k1F1B);
}

// Two stages in two subclusters, f = 1 µs, b = 2 µs (t = 3 µs), one slow link
// c = 750 ns = t/4 with no latency. P = 3 µs, t/10 <= c < t/2, so δ = 2: N = [3, 1].
//
// 1F1B (N = [2, 1]), M = 4, in ns:
//   stage 0: F0 [0,1000] F1 [1000,2000]          activations land at 1750, 2750
//   stage 1: F0 [1750,2750] B0 [2750,4750]       gradient 0 lands at 5500
//            F1 [4750,5750] B1 [5750,7750]       gradient 1 lands at 8500
//   stage 0: B0 [5500,7500] F2 [7500,8500]       activation 2 lands at 9250
//   stage 1: idle 7750..9250, F2 [9250,10250] B2 [10250,12250] -> 13000
//   stage 0: B1 [8500,10500] F3 [10500,11500]    activation 3 lands at 12250
//   stage 1: F3 [12250,13250] B3 [13250,15250]   gradient 3 lands at 16000
//   stage 0: B2 [13000,15000] B3 [16000,18000]                 iteration 18000
// Why the link shows: stage 0 issues F(k+2) only after B(k), so between stage 1
// finishing B(k) and starting F(k+2) lie c + b + f + c = t + 2c, of which stage 1 can
// fill only t (its F(k+1), B(k+1)). Every second microbatch exposes 2c: in general
// T_1F1B = (M + 1) t + 2c + 2c floor((M − 1) / 2).
//
// HARP (N = [3, 1]) issues F(k+2) before B(k) is due, so the loop has a spare
// microbatch and stage 1 never waits after its first forward:
//   stage 1 runs F0 B0 F1 B1 ... back to back from 1750 to 1750 + 4t = 13750, the
//   last gradient lands at 14500 and stage 0's B3 ends at 16500 = (M + 1) t + 2c,
// which is the closed form sum(t_i + 2c_i) + (M − 1) max t = 3000+1500+3000 + 3*3000.
TEST(HarpVs1F1BTest, OneSlowLinkByHand) {
  for (int M = 1; M <= 16; ++M) {
    plan::Plan p = testing::equal_plan(2, M, 1000, 2000, 750);
    p.stages[0].crosses_nodes = true;
    p.stages[0].subcluster_name = "a";
    p.stages[1].subcluster_name = "b";
    const Nanos t = 3000, c = 750;
    const auto harp = delta_counts(p);
    ASSERT_EQ(harp, (std::vector<int>{std::min(3, M), 1}));
    const Nanos t_harp = testing::iteration_ns(p, harp);
    const Nanos t_1f1b = testing::iteration_ns(p, one_f_one_b_counts(p));
    SCOPED_TRACE("M=" + std::to_string(M));
    EXPECT_EQ(t_harp, (M + 1) * t + 2 * c);
    EXPECT_EQ(t_harp, s_to_ns(plan::closed_form(p).iteration_s));
    EXPECT_EQ(t_1f1b, (M + 1) * t + 2 * c + 2 * c * ((M - 1) / 2));
    if (M == 4) {
      EXPECT_EQ(t_1f1b, 18000);
      EXPECT_EQ(t_harp, 16500);
    }
    if (M >= 3) {
      EXPECT_LT(t_harp, t_1f1b);
    }
  }
}

// The δ rule can lose. Three stages, times in µs: stage 0 f=3 b=3, stage 1 f=1 b=6
// (the bottleneck, t=7), stage 2 f=1 b=1; the only non-free link is the
// cross-subcluster one between stages 1 and 2, c = 1 (c >= P/10 = 0.7, so δ = 2):
// N = [4, 3, 1] against 1F1B's [3, 2, 1], M = 9.
//   Gradient 0 reaches stage 1 at 8 (F0 on stage 1 [3,4], link, stage 2 [5,7], link).
//   1F1B: stage 1 runs F0 [3,4] F1 [6,7] B0 [8,14] and then never waits: 72 µs.
//   HARP: stage 1 must run F2 before B0, and activation 2 only exists at 9 because
//         stage 0's forwards take 3 µs each: F2 [9,10] B0 [10,16], one more µs lost on
//         the bottleneck, never recovered: 73 µs (the closed form also says 73).
// The rule adds warm-up forwards for the downstream link but a slow upstream stage
// cannot feed them in time, and the in-order list makes the bottleneck wait for a
// forward while a backward is ready. Kept as a test so the trade-off stays visible.
TEST(HarpVs1F1BTest, DeltaRuleCanLoseWhenUpstreamIsSlowToFeedWarmUp) {
  plan::Plan p;
  p.microbatches = 9;
  const std::int64_t f[] = {3000, 1000, 1000}, b[] = {3000, 6000, 1000};
  for (int i = 0; i < 3; ++i) {
    plan::Stage s;
    s.fwd_s = ns(f[i]);
    s.bwd_s = ns(b[i]);
    p.stages.push_back(s);
  }
  p.stages[1].comm_s = ns(1000);
  p.stages[1].crosses_nodes = true;
  ASSERT_EQ(delta_counts(p), (std::vector<int>{4, 3, 1}));
  EXPECT_EQ(testing::iteration_ns(p, delta_counts(p)), 73000);
  EXPECT_EQ(testing::iteration_ns(p, one_f_one_b_counts(p)), 72000);
  EXPECT_EQ(s_to_ns(plan::closed_form(p).iteration_s), 73000);
}

// Seeded sweep: harp-1f1b never takes longer than 1F1B, in the region where our
// searches (several million random and small-integer cases) found no counterexample:
//   - two subclusters, so exactly one cross-subcluster link, c in [0, 1.2 max t];
//   - links inside a subcluster at most 5% of max t; latency at most c / 5;
//   - b = 2f on every stage (f in [1, 4] µs);
//   - M > 2S.
// Outside it the δ rule can lose by up to a few percent: M <= S (counts clamped to M);
// fwd:bwd ratios that differ between stages (the case above); two or more cross links,
// where an early slow link throttles the warm-up that a later link's δ asks for.
TEST(HarpVs1F1BTest, NeverSlowerInTheSweptRegion) {
  std::mt19937 rng(1234);
  int strictly_better = 0;
  const int kTrials = 1500;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int S = 2 + static_cast<int>(rng() % 7);
    plan::Plan p;
    p.microbatches = 2 * S + 1 + static_cast<int>(rng() % (3 * S));
    std::int64_t t_max = 0;
    for (int i = 0; i < S; ++i) {
      plan::Stage s;
      const std::int64_t f = 1000 + static_cast<std::int64_t>(rng() % 3001);
      s.fwd_s = ns(f);
      s.bwd_s = ns(2 * f);
      t_max = std::max(t_max, 3 * f);
      p.stages.push_back(s);
    }
    const int cut = static_cast<int>(rng() % (S - 1));
    for (int i = 0; i + 1 < S; ++i) {
      plan::Stage& s = p.stages[i];
      s.crosses_nodes = i == cut;
      const std::int64_t cap = i == cut ? t_max * 6 / 5 : t_max / 20;
      const std::int64_t c = static_cast<std::int64_t>(rng() % (cap + 1));
      s.comm_s = ns(c);
      s.comm_latency_s = ns(static_cast<std::int64_t>(rng() % (c / 5 + 1)));
    }
    const Nanos harp = testing::iteration_ns(p, delta_counts(p));
    const Nanos one_f = testing::iteration_ns(p, one_f_one_b_counts(p));
    EXPECT_LE(harp, one_f) << "trial " << trial << " S=" << S << " M=" << p.microbatches
                           << " cut=" << cut;
    strictly_better += harp < one_f;
  }
  // Most draws put a cross link above max t / 10, where the δ rule adds warm-up.
  EXPECT_GT(strictly_better, kTrials / 2);
}

}  // namespace
}  // namespace harp::sim
