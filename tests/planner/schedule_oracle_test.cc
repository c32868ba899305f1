// `harp plan --schedule auto` against the joint brute force (brute_force_schedules in
// tests/reference/brute_force_planner.h): every plan of the search space under every
// schedule, simulated, on random small problems whose layers split their backward.
//
// The planner is exact for harp-1f1b's closed form (planner_brute_force_test.cc), not for
// the simulated pair: it weighs every schedule on the plans its searches met (under
// HARP's counts and under standard 1F1B's; kScheduleCandidates at most). The joint optimum
// bounds it from below, and the test asserts that bound, that the chosen pair is one the
// brute force enumerated, and that the gap stays where it was measured (floors below).
#include <gtest/gtest.h>

#include "harp/planner/schedule_choice.h"
#include "random_cases.h"

namespace harp::planner {
namespace {

using namespace testutil;  // NOLINT: test-local helpers

// A case of the planner's oracle test with split backwards: each layer's weight
// gradients take 30-55% of its backward (measured: 0.37-0.50 on the profiled layers) and
// a pending W keeps 5-40% of its activation bytes.
RandomCase split_case(std::uint32_t seed) {
  RandomCase rc = make_random_case(seed, /*interplay_only=*/false, /*recompute=*/false);
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  for (StageCosts::LayerBytes& b : rc.layers) {
    b.weight_grad_fraction = uni(0.3, 0.55);
    b.weight_grad_bytes = uni(0.05, 0.4) * b.activation_bytes;
  }
  rc.options.schedule = plan::ScheduleKind::kHarp1F1B;  // the search --schedule runs on
  return rc;
}

struct Tally {
  int cases = 0, feasible = 0, same = 0, split_chosen = 0, joint_split = 0;
  int missed = 0;  // the search found no plan, but some pair fits (fewer counts, a split)
  int from_candidate = 0, weighed = 0;  // pairs whose plan was not the search's answer; plans weighed
  double worst_gap = 0, sum_gap = 0;
  long long pairs = 0;
};

void check_case(std::uint32_t seed, Tally* tally) {
  const RandomCase rc = split_case(seed);
  const cluster::Cluster cluster = cluster_from_yaml(rc.cluster_yaml);
  const StageCosts costs = StageCosts::from_tables(cluster, rc.layers, rc.times, rc.microbatch_size, rc.config);
  SearchOptions with_candidates = rc.options;
  with_candidates.candidates = kScheduleCandidates;
  StatusOr<SearchResult> searched = search_pipeline(costs, with_candidates);
  ASSERT_TRUE(searched.ok()) << searched.status().to_string();
  const reference::JointResult joint = reference::brute_force_schedules(costs, rc.options, auto_schedule_kinds());
  ++tally->cases;
  tally->pairs += joint.pairs_simulated;
  if (!searched->feasible) {
    tally->missed += joint.feasible;
    return;
  }
  // The planner's answer: the fastest pair that fits of the plans met under each schedule.
  ASSERT_FALSE(searched->candidates.empty());
  EXPECT_EQ(searched->candidates.front().stages.size(), searched->plan.stages.size()) << "the answer first";
  const PairChoice pair = fastest_pair(searched->candidates, costs, auto_schedule_kinds());
  const std::optional<ScheduleOption> chosen = fastest_fitting(pair.options);
  ASSERT_TRUE(chosen.has_value()) << describe_options(pair.options) << "\n" << describe_case(rc);
  tally->from_candidate += pair.plan > 0;
  tally->weighed += pair.weighed;
  ASSERT_TRUE(joint.feasible) << "the planner's pair fits, so the joint brute force finds one\n" << describe_case(rc);
  ++tally->feasible;
  // The joint optimum is a lower bound of every pair in the space, the planner's among them.
  EXPECT_GE(chosen->simulated_s, joint.simulated_s * (1 - 1e-12))
      << "the planner's pair beats every enumerated one: outside the space, or simulated differently\n"
      << describe_case(rc);
  // And it is one of the pairs enumerated (its plan in the space, simulated alike).
  const auto at = std::lower_bound(joint.times.begin(), joint.times.end(), chosen->simulated_s * (1 - 1e-12));
  EXPECT_TRUE(at != joint.times.end() && near_rel(*at, chosen->simulated_s, 1e-12))
      << "no enumerated pair takes " << chosen->simulated_s << " s\n" << describe_case(rc);
  const double gap = chosen->simulated_s / joint.simulated_s - 1;
  tally->same += gap <= 1e-9;
  tally->worst_gap = std::max(tally->worst_gap, gap);
  tally->sum_gap += gap;
  tally->split_chosen += plan::splits_backward(chosen->kind);
  tally->joint_split += plan::splits_backward(joint.kind);
}

TEST(ScheduleOracle, AutoAgainstEveryPlanUnderEverySchedule) {
  Tally t;
  for (std::uint32_t k = 0; k < 120; ++k) {
    const std::uint32_t seed = 7000001u + k;
    SCOPED_TRACE("case seed " + std::to_string(seed));
    check_case(seed, &t);
  }
  const double mean_gap = t.sum_gap / std::max(1, t.feasible);
  std::printf("%d cases, %d feasible: the planner's pair is the joint optimum in %d, within %.2f%% in every "
              "one (mean %.3f%%); %d pairs on a plan other than the search's answer (%d plans weighed); split "
              "schedules chosen %d, in the joint optimum %d; %d cases where only the joint space fits; %lld "
              "pairs simulated\n",
              t.cases, t.feasible, t.same, 100 * t.worst_gap, 100 * mean_gap, t.from_candidate, t.weighed,
              t.split_chosen, t.joint_split, t.missed, t.pairs);
  // Floors under what was measured with libstdc++'s streams: 120 cases, 89 feasible, the
  // joint optimum in 71 (62 when only the search's answer was weighed), mean gap 1.08%
  // (2.32%), worst 24.7% (64.8%), split schedules in 85 optima. A schedule generator or a
  // candidate set that got worse moves these.
  EXPECT_GE(t.feasible, 60);
  EXPECT_GE(t.same, t.feasible * 2 / 3);
  EXPECT_LE(mean_gap, 0.02);
  EXPECT_GE(t.joint_split, t.feasible / 2) << "the cases stopped making split schedules matter";
  EXPECT_GE(t.from_candidate, 1) << "no case where another searched plan wins";
}

}  // namespace
}  // namespace harp::planner
