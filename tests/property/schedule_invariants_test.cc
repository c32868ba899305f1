// Schedule invariants over a grid of (stages, microbatches, launch counts): counts and
// order per stage, in-flight bounded by the launch count, sends paired with receives,
// and every lowered schedule drains under both send modes. The checks walk the action
// lists directly rather than trusting validate(); validate's answers are compared too.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "harp/schedule/generators.h"
#include "harp/schedule/lowering.h"
#include "harp/schedule/validate.h"

namespace harp::schedule {
namespace {

enum class Kind { kGpipe, k1F1B, kCounts };

struct Case {
  Kind kind;
  int stages, microbatches;
  std::vector<int> counts;  // launch counts; the expected ones for gpipe and 1f1b
  std::string name;
};

// One parameter = one family at one stage count, swept over its microbatch counts (or
// random launch counts) inside the test: ctest runs every parameter as its own process,
// so a parameter per (S, M, N) would cost far more in process start-up than in checks.
struct Group {
  std::string name;
  std::vector<Case> cases;
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const Group& g, std::ostream* os) { *os << g.name; }

constexpr int kMaxStages = 8, kMaxMicrobatches = 24, kRandomPerStageCount = 25;

Group standard_group(Kind kind, int S) {
  const std::string family = kind == Kind::kGpipe ? "gpipe" : "onefoneb";
  Group g{family + "_S" + std::to_string(S), {}};
  for (int M = 1; M <= kMaxMicrobatches; ++M) {
    Case c{kind, S, M, {}, family + " S=" + std::to_string(S) + " M=" + std::to_string(M)};
    for (int i = 0; i < S; ++i) c.counts.push_back(kind == Kind::kGpipe ? M : std::min(S - i, M));
    g.cases.push_back(c);
  }
  return g;
}

// Random non-increasing launch counts in [1, M]. The raw mt19937 stream is fixed by the
// standard and the modulo mapping is ours, so the cases are the same on every library.
Group random_group(int S) {
  std::mt19937 rng(20240611u + static_cast<uint32_t>(S));
  auto uniform = [&](int lo, int hi) {
    return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1));
  };
  Group g{"counts_S" + std::to_string(S), {}};
  for (int k = 0; k < kRandomPerStageCount; ++k) {
    Case c{Kind::kCounts, S, uniform(1, kMaxMicrobatches), std::vector<int>(S), ""};
    // A small last count, as the δ rule gives, leaves room for the others to vary.
    c.counts[S - 1] = uniform(1, std::min(c.microbatches, 3));
    for (int i = S - 2; i >= 0; --i) c.counts[i] = uniform(c.counts[i + 1], c.microbatches);
    c.name = "counts S=" + std::to_string(S) + " M=" + std::to_string(c.microbatches) + " N=";
    for (int i = 0; i < S; ++i) c.name += (i ? "," : "") + std::to_string(c.counts[i]);
    g.cases.push_back(c);
  }
  return g;
}

std::vector<Group> all_groups() {
  std::vector<Group> out;
  for (int S = 1; S <= kMaxStages; ++S) {
    out.push_back(standard_group(Kind::kGpipe, S));
    out.push_back(standard_group(Kind::k1F1B, S));
    out.push_back(random_group(S));
  }
  return out;
}

Schedule generate(const Case& c) {
  switch (c.kind) {
    case Kind::kGpipe: return generate_gpipe(c.stages, c.microbatches);
    case Kind::k1F1B: return generate_1f1b(c.stages, c.microbatches);
    case Kind::kCounts: break;
  }
  StatusOr<Schedule> s = generate_with_launch_counts(c.stages, c.microbatches, c.counts);
  HARP_CHECK(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

// Each stage: M forwards and M backwards, each microbatch once, F(m) before B(m), and
// the running count F - B stays in [0, N_i] and reaches N_i.
void check_compute_order_and_inflight(const Case& c) {
  const Schedule s = generate(c);
  ASSERT_EQ(s.num_stages, c.stages);
  ASSERT_EQ(s.num_microbatches, c.microbatches);
  ASSERT_EQ(static_cast<int>(s.actions.size()), c.stages);
  for (int r = 0; r < c.stages; ++r) {
    std::vector<int> f_seen(c.microbatches, 0), b_seen(c.microbatches, 0);
    int inflight = 0, peak = 0;
    for (const Action& a : s.actions[r]) {
      ASSERT_EQ(a.stage, r);
      ASSERT_TRUE(a.is_compute());
      ASSERT_GE(a.microbatch, 0);
      ASSERT_LT(a.microbatch, c.microbatches);
      if (a.kind == ActionKind::kF) {
        ++f_seen[a.microbatch];
        ++inflight;
      } else {
        ASSERT_EQ(f_seen[a.microbatch], 1) << "B before F: " << to_string(a);
        ++b_seen[a.microbatch];
        --inflight;
      }
      ASSERT_GE(inflight, 0);
      peak = std::max(peak, inflight);
    }
    for (int m = 0; m < c.microbatches; ++m) {
      EXPECT_EQ(f_seen[m], 1) << "stage " << r << " microbatch " << m;
      EXPECT_EQ(b_seen[m], 1) << "stage " << r << " microbatch " << m;
    }
    EXPECT_EQ(peak, std::min(c.counts[r], c.microbatches)) << "stage " << r;
  }
  ValidationResult v = validate_compute(s);
  ASSERT_TRUE(v.ok) << v.error;
  // Unit time, F = B = 1: nothing beats the (M + S - 1)(f + b) of an ideal pipeline,
  // and GPipe and 1F1B reach it.
  const int ideal = 2 * (c.microbatches + c.stages - 1);
  if (c.kind == Kind::kCounts)
    EXPECT_GE(v.steps, ideal);
  else
    EXPECT_EQ(v.steps, ideal);
}

// Lowering keeps each rank's compute order, pairs every send with a receive of the same
// microbatch in the same FIFO position, and ends each rank with REDUCE_GRAD, STEP.
void check_lowering_pairs_sends_with_receives(const Case& c) {
  const Schedule compute = generate(c);
  StatusOr<Schedule> lowered = lower(compute);
  HARP_ASSERT_OK(lowered);
  const int S = c.stages;
  // [r][dir]: microbatches sent by rank r (dir 0 forward to r+1, 1 backward to r-1) and
  // received from rank r, in list order.
  std::vector<std::vector<std::vector<int>>> sent(S, std::vector<std::vector<int>>(2));
  std::vector<std::vector<std::vector<int>>> received = sent;
  for (int r = 0; r < S; ++r) {
    const auto& list = lowered->actions[r];
    ASSERT_GE(list.size(), 2u);
    EXPECT_EQ(list[list.size() - 2].kind, ActionKind::kReduceGrad);
    EXPECT_EQ(list.back().kind, ActionKind::kStep);
    std::vector<Action> only_compute;
    for (const Action& a : list) {
      ASSERT_EQ(a.stage, r);
      if (a.is_compute()) only_compute.push_back(a);
      if (a.kind == ActionKind::kSendF) sent[r][0].push_back(a.microbatch);
      if (a.kind == ActionKind::kSendB) sent[r][1].push_back(a.microbatch);
      if (a.kind == ActionKind::kRecvF) {
        ASSERT_GT(r, 0);
        received[r - 1][0].push_back(a.microbatch);
      }
      if (a.kind == ActionKind::kRecvB) {
        ASSERT_LT(r, S - 1);
        received[r + 1][1].push_back(a.microbatch);
      }
    }
    EXPECT_EQ(only_compute, compute.actions[r]) << "rank " << r;
  }
  for (int r = 0; r < S; ++r) {
    for (int dir = 0; dir < 2; ++dir) {
      const bool has_peer = dir == 0 ? r < S - 1 : r > 0;
      EXPECT_EQ(static_cast<int>(sent[r][dir].size()), has_peer ? c.microbatches : 0);
      EXPECT_EQ(sent[r][dir], received[r][dir]) << "rank " << r << " direction " << dir;
    }
  }
}

void check_lowered_schedule_drains(const Case& c) {
  StatusOr<Schedule> lowered = lower(generate(c));
  HARP_ASSERT_OK(lowered);
  std::vector<int> expected_peak;
  for (int n : c.counts) expected_peak.push_back(std::min(n, c.microbatches));
  size_t longest = 0;
  for (const auto& list : lowered->actions) longest = std::max(longest, list.size());
  for (SendMode mode : {SendMode::kRendezvous, SendMode::kAsyncSends}) {
    ValidationResult v = validate(*lowered, mode);
    ASSERT_TRUE(v.ok) << (mode == SendMode::kRendezvous ? "rendezvous: " : "async: ") << v.error;
    EXPECT_EQ(v.peak_inflight, expected_peak);
    // Each step runs at least one action and no rank runs more than one per step.
    EXPECT_LE(v.steps, static_cast<int>(lowered->total_actions()));
    EXPECT_GE(v.steps, static_cast<int>(longest));
  }
}

class ScheduleInvariants : public ::testing::TestWithParam<Group> {
 protected:
  void for_each_case(void (*check)(const Case&)) {
    for (const Case& c : GetParam().cases) {
      SCOPED_TRACE(c.name);
      check(c);
    }
  }
};

TEST_P(ScheduleInvariants, ComputeOrderAndInflight) {
  for_each_case(check_compute_order_and_inflight);
}

TEST_P(ScheduleInvariants, LoweringPairsSendsWithReceives) {
  for_each_case(check_lowering_pairs_sends_with_receives);
}

TEST_P(ScheduleInvariants, LoweredScheduleDrainsUnderBothSendModes) {
  for_each_case(check_lowered_schedule_drains);
}

INSTANTIATE_TEST_SUITE_P(Grid, ScheduleInvariants, ::testing::ValuesIn(all_groups()),
                         [](const ::testing::TestParamInfo<Group>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace harp::schedule
