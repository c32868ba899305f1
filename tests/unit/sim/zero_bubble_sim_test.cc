// The simulator on split backwards (I and W timed apart): ZB-H1's closed form on equal
// stages, and harp-zb never slower than harp-1f1b on a generated set of plans.
#include <gtest/gtest.h>

#include <random>

#include "harp/plan/closed_form.h"
#include "harp/schedule/lower_plan.h"
#include "harp/sim/svg.h"
#include "sim_test_util.h"

namespace harp::sim::testing {
namespace {

using plan::ScheduleKind;

Nanos simulated_ns(const plan::Plan& p, ScheduleKind kind) {
  auto low = schedule::lower_plan(p, kind);
  EXPECT_TRUE(low.ok()) << low.status().to_string();
  EXPECT_TRUE(low->check.ok) << low->check.error;
  return simulate_ok(p, low->lowered, false).iteration_ns;
}

// Equal stages, free links: 1F1B's bubble (S−1)(F + I + W), ZB-H1's (S−1)(F + I − W)
// (Qi et al., §3), on top of M(F + I + W) of work per stage.
TEST(ZeroBubbleSim, ZbH1BubbleIsThePapersOnEqualStages) {
  const std::int64_t f = 3000, i = 4000, w = 2000;
  for (int S : {2, 4, 5}) {
    for (int M : {S, 2 * S + 1}) {
      plan::Plan p = equal_plan(S, M, f, i + w);
      for (auto& s : p.stages) s.bwd_weight_s = ns(w);
      SCOPED_TRACE("S " + std::to_string(S) + " M " + std::to_string(M));
      EXPECT_EQ(simulated_ns(p, ScheduleKind::kZbH1), M * (f + i + w) + (S - 1) * (f + i - w));
      EXPECT_EQ(simulated_ns(p, ScheduleKind::k1F1B), M * (f + i + w) + (S - 1) * (f + i + w));
      // The split's pieces are timed apart: every stage's W spans add up to M x W.
      auto low = schedule::lower_plan(p, ScheduleKind::kZbH1);
      const SimResult r = simulate_ok(p, low->lowered);
      Nanos w_total = 0;
      for (const Span& sp : r.spans) w_total += sp.action.kind == schedule::ActionKind::kW ? sp.end_ns - sp.start_ns : 0;
      EXPECT_EQ(w_total, static_cast<Nanos>(S) * M * w);
      EXPECT_EQ(r.ranks[0].peak_held, S);
      EXPECT_EQ(r.ranks[S - 1].peak_held, S) << "the last stage holds the first stage's count";
      EXPECT_EQ(r.ranks[S - 1].peak_inflight, 1);
      // The timeline draws I and W in their own colours, with their legend.
      const std::string svg = svg_timeline(r, p, "zb-h1");
      for (const char* s : {"I: input", "W: weights", "class=\"I\"", "class=\"W\""})
        EXPECT_NE(svg.find(s), std::string::npos) << s;
    }
  }
}

// harp-zb keeps the best of its candidates on its own clock, one of which is harp-1f1b
// with each W right after its I; the simulator (link queues, the step's barrier) judges.
// And it never raises the pipeline's peak memory (while a pending W keeps no more than
// an in-flight forward): no stage holds more than the most any stage holds under
// harp-1f1b.
TEST(ZeroBubbleSim, HarpZbIsNeverSlowerThanHarp1F1B) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> t(500, 20000);
  int faster = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int S = 2 + trial % 5, M = S + trial % 9;
    plan::Plan p;
    p.microbatches = M;
    for (int r = 0; r < S; ++r) {
      plan::Stage s;
      s.fwd_s = ns(t(rng));
      const std::int64_t w = t(rng), i = t(rng);
      s.bwd_s = ns(i + w);
      s.bwd_weight_s = ns(w);
      s.comm_s = r + 1 < S ? ns(trial % 3 == 0 ? 0 : t(rng)) : 0.0;
      s.crosses_nodes = trial % 2 == 0;
      s.memory_static_bytes = 1e6 * t(rng);
      s.activation_bytes = 1e5 * t(rng);
      s.weight_grad_bytes = s.activation_bytes * (trial % 4) / 4.0;
      p.stages.push_back(s);
    }
    auto run = [&](ScheduleKind kind) {
      auto low = schedule::lower_plan(p, kind);
      EXPECT_TRUE(low.ok() && low->check.ok);
      return simulate_ok(p, low->lowered, false);
    };
    const SimResult harp = run(ScheduleKind::kHarp1F1B), zb = run(ScheduleKind::kHarpZb);
    EXPECT_LE(zb.iteration_ns, harp.iteration_ns) << "trial " << trial;
    faster += zb.iteration_ns < harp.iteration_ns;
    Bytes peak = 0;
    for (const RankStats& r : harp.ranks) peak = std::max(peak, r.peak_memory_bytes);
    for (const RankStats& r : zb.ranks) EXPECT_LE(r.peak_memory_bytes, peak * (1 + 1e-9)) << "trial " << trial;
  }
  EXPECT_GE(faster, 30) << "harp-zb is faster on most of these plans";
}

}  // namespace
}  // namespace harp::sim::testing
