// Drift detection (runtime/io/drift.h) on synthetic step times: a stage slowed 2x after
// step 20 is named within the window; 1.2x under a 1.3 threshold is not; 200 steps of
// +-15% noise report nothing; a drift that ends is reported as one; a single slow step
// (a checkpoint) is not a drift. Links between stages are judged the same way: a link
// slowed 4x past the bound is named as the link, one far below the bound swinging is not.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "harp/runtime/io/drift.h"

namespace harp::runtime {
namespace {

// Stage times: stage s takes base[s] x (1 + uniform noise) x slow(step, s).
std::vector<Drift> run(int steps, const std::vector<double>& base, double noise,
                       const std::function<double(int, int)>& slow, DriftConfig config = {1.3, 5}) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-noise, noise);
  DriftDetector d(static_cast<int>(base.size()), config);
  std::vector<Drift> out;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> t;
    for (size_t s = 0; s < base.size(); ++s) t.push_back(base[s] * (1 + u(rng)) * slow(step, static_cast<int>(s)));
    if (auto drift = d.observe(step, t)) out.push_back(*drift);
  }
  return out;
}

TEST(Drift, ASlowedStageIsNamedWithinTheWindow) {
  const auto drifts = run(60, {0.01, 0.02, 0.015}, 0.1, [](int step, int s) { return s == 1 && step >= 20 ? 2.0 : 1.0; });
  ASSERT_EQ(drifts.size(), 1u);
  EXPECT_EQ(drifts[0].stage, 1);
  EXPECT_GE(drifts[0].step, 20);
  EXPECT_LE(drifts[0].step, 20 + 5);
  EXPECT_NEAR(drifts[0].ratio, 2.0, 0.25);
  EXPECT_NEAR(drifts[0].baseline_s, 0.02, 0.002);
}

TEST(Drift, BelowTheThresholdNothingIsReported) {
  EXPECT_TRUE(run(60, {0.01, 0.02}, 0.05, [](int step, int s) { return s == 0 && step >= 20 ? 1.2 : 1.0; }).empty());
}

TEST(Drift, NoiseWithinTheThresholdNeverFlaps) {
  EXPECT_TRUE(run(200, {0.01, 0.02, 0.03, 0.04}, 0.15, [](int, int) { return 1.0; }).empty());
  // A single slow step (a checkpoint write, a validation) is not a drift.
  EXPECT_TRUE(run(60, {0.01, 0.02}, 0.05, [](int step, int) { return step == 30 ? 5.0 : 1.0; }).empty());
}

// What a run here showed: a sub-millisecond stage swinging between two levels 1.5x apart
// beside a 3 ms stage. It cannot move the period, and is not reported.
TEST(Drift, AFastStagesSwingsAreNotADrift) {
  EXPECT_TRUE(run(200, {0.003, 0.0005}, 0.05, [](int step, int s) { return s == 1 && (step / 20) % 2 ? 1.5 : 1.0; })
                  .empty());
  // The same stage slowed past the slow one moves the period: reported, and named.
  const auto drifts = run(60, {0.003, 0.0005}, 0.05, [](int step, int s) { return s == 1 && step >= 20 ? 10.0 : 1.0; });
  ASSERT_EQ(drifts.size(), 1u);
  EXPECT_EQ(drifts[0].stage, 1);
}

// A slowdown that starts inside a step (the step averages old and new speed) is reported at
// its full size: the window's median crosses at that partial step's value (1.4x here), the
// level is read from the window's newer half.
TEST(Drift, ASlowdownThatStartsMidStepIsReportedAtItsFullSize) {
  const auto drifts = run(60, {0.02, 0.01}, 0.02, [](int step, int s) {
    return s == 0 && step >= 20 ? (step == 20 ? 1.4 : 2.0) : 1.0;
  });
  ASSERT_EQ(drifts.size(), 1u);
  EXPECT_NEAR(drifts[0].ratio, 2.0, 0.1);
  EXPECT_NEAR(drifts[0].measured_s, 0.04, 0.002);
}

// A stage at half the bound or more that moves past the threshold is a drift even when the
// bound stays: a stage that was the bound recovering under a plan made for its drift.
TEST(Drift, AStageNearTheBoundThatRecoversIsADriftThoughTheBoundStays) {
  const auto drifts = run(60, {0.02, 0.015, 0.002}, 0.05, [](int step, int s) {
    return s == 1 && step >= 20 ? 0.5 : 1.0;
  });
  ASSERT_EQ(drifts.size(), 1u);
  EXPECT_EQ(drifts[0].stage, 1);
  EXPECT_NEAR(drifts[0].ratio, 0.5, 0.1);
  ASSERT_EQ(drifts[0].stage_ratios.size(), 3u);
  EXPECT_NEAR(drifts[0].stage_ratios[0], 1.0, 0.1);
  EXPECT_EQ(drifts[0].stage_ratios[2], 1.0) << "far below the bound: not judged";
}

TEST(Drift, ADriftThatEndsIsReportedAsOne) {
  const auto drifts = run(80, {0.01, 0.02}, 0.05, [](int step, int s) { return s == 0 && step >= 20 && step < 50 ? 3.0 : 1.0; });
  ASSERT_EQ(drifts.size(), 2u);
  EXPECT_EQ(drifts[0].stage, 0);
  EXPECT_GT(drifts[0].ratio, 2.5);
  EXPECT_EQ(drifts[1].stage, 0);
  EXPECT_LT(drifts[1].ratio, 0.4) << "faster again: back to the old baseline";
  EXPECT_GE(drifts[1].step, 50);
  EXPECT_TRUE(run(60, {0.01}, 0.0, [](int step, int) { return step >= 20 ? 2.0 : 1.0; }, {0, 5}).empty()) << "off";
}

// Stage times as above and link transits: link l takes links[l] x (1 + noise) x
// slow_link(step, l).
std::vector<Drift> run_links(int steps, const std::vector<double>& stages, const std::vector<double>& links,
                             const std::function<double(int, int)>& slow_link) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-0.05, 0.05);
  DriftDetector d(static_cast<int>(stages.size()), {1.3, 5});
  std::vector<Drift> out;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> t, c;
    for (double x : stages) t.push_back(x * (1 + u(rng)));
    for (size_t l = 0; l < links.size(); ++l) c.push_back(links[l] * (1 + u(rng)) * slow_link(step, static_cast<int>(l)));
    if (auto drift = d.observe(step, t, c)) out.push_back(*drift);
  }
  return out;
}

TEST(Drift, ALinkSlowedPastTheBoundIsNamedAsTheLink) {
  // Three stages of 20, 30, 25 ms; links of 10 and 8 ms; the second link 4x slower from
  // step 20 on (32 ms: the pipeline's new bound).
  const auto drifts = run_links(60, {0.02, 0.03, 0.025}, {0.01, 0.008}, [](int step, int l) {
    return l == 1 && step >= 20 ? 4.0 : 1.0;
  });
  ASSERT_EQ(drifts.size(), 1u);
  EXPECT_EQ(drifts[0].link, 1);
  EXPECT_EQ(drifts[0].stage, -1);
  EXPECT_GE(drifts[0].step, 20);
  EXPECT_LE(drifts[0].step, 25);
  EXPECT_NEAR(drifts[0].ratio, 4.0, 0.4);
  EXPECT_NEAR(drifts[0].measured_s, 0.032, 0.003);
  ASSERT_EQ(drifts[0].link_ratios.size(), 2u);
  EXPECT_EQ(drifts[0].link_ratios[0], 1.0) << "a third of the bound: not judged";
  ASSERT_EQ(drifts[0].stage_ratios.size(), 3u);
  ASSERT_EQ(drifts[0].link_measured_s.size(), 2u);
  EXPECT_NEAR(drifts[0].link_baseline_s[1], 0.008, 0.001);
}

TEST(Drift, ALinkFarBelowTheBoundSwingingIsNotADriftNorIsOneThatStaysHidden) {
  // A 1 ms link swinging 1.5x beside 20 ms stages, and a 4 ms link slowed 2x (8 ms: still
  // under half the bound, hidden by the pipeline): no drift.
  EXPECT_TRUE(run_links(120, {0.02, 0.02, 0.02}, {0.001, 0.004}, [](int step, int l) {
                return l == 0 ? ((step / 20) % 2 ? 1.5 : 1.0) : step >= 30 ? 2.0 : 1.0;
              }).empty());
}

TEST(Drift, WithoutLinkFiguresOnlyStagesAreJudgedAndNoLinkIsReported) {
  DriftDetector d(2, {1.3, 5});
  std::vector<Drift> drifts;
  for (int step = 0; step < 30; ++step)
    if (auto drift = d.observe(step, {step >= 15 ? 0.03 : 0.01, 0.01})) drifts.push_back(*drift);
  ASSERT_EQ(drifts.size(), 1u);
  EXPECT_EQ(drifts[0].stage, 0);
  EXPECT_EQ(drifts[0].link, -1);
  EXPECT_TRUE(drifts[0].link_ratios.empty());
  EXPECT_TRUE(drifts[0].link_measured_s.empty());
  EXPECT_NEAR(drifts[0].ratio, 3.0, 1e-9);
}

}  // namespace
}  // namespace harp::runtime
