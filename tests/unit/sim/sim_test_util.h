// Small builders shared by the sim tests: plans with integral-nanosecond times and
// lowered schedules from launch counts.
#pragma once

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "harp/plan/plan.h"
#include "harp/schedule/generators.h"
#include "harp/schedule/lowering.h"
#include "harp/sim/simulator.h"

namespace harp::sim::testing {

// Times are written in integral nanoseconds so s_to_ns gives them back exactly.
inline Seconds ns(std::int64_t v) { return static_cast<Seconds>(v) * 1e-9; }

// S stages with forward f, backward b (ns) and one-way transfer c (ns, zero latency)
// on every boundary; the last stage has no link.
inline plan::Plan equal_plan(int stages, int microbatches, std::int64_t f, std::int64_t b,
                             std::int64_t c = 0) {
  plan::Plan p;
  p.microbatches = microbatches;
  for (int i = 0; i < stages; ++i) {
    plan::Stage s;
    s.fwd_s = ns(f);
    s.bwd_s = ns(b);
    s.comm_s = i + 1 < stages ? ns(c) : 0.0;
    p.stages.push_back(s);
  }
  return p;
}

inline schedule::Schedule lowered(int stages, int microbatches, const std::vector<int>& n) {
  auto compute = schedule::generate_with_launch_counts(stages, microbatches, n);
  EXPECT_TRUE(compute.ok()) << compute.status().to_string();
  auto low = schedule::lower(*compute);
  EXPECT_TRUE(low.ok()) << low.status().to_string();
  return std::move(low).value();
}

inline SimResult simulate_ok(const plan::Plan& plan, const schedule::Schedule& s,
                             bool record_spans = true) {
  SimOptions o;
  o.record_spans = record_spans;
  auto r = simulate(plan, s, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

// Simulated iteration time of `plan` under launch counts `n`.
inline Nanos iteration_ns(const plan::Plan& plan, const std::vector<int>& n) {
  return simulate_ok(plan, lowered(plan.num_stages(), plan.microbatches, n), false).iteration_ns;
}

// The span of (rank, kind, microbatch); fails the test if absent.
inline const Span& find_span(const SimResult& r, int rank, schedule::ActionKind kind, int mb) {
  for (const Span& s : r.spans)
    if (s.rank == rank && s.action.kind == kind && s.action.microbatch == mb) return s;
  ADD_FAILURE() << "no span for rank " << rank << " microbatch " << mb;
  static const Span none;
  return none;
}

}  // namespace harp::sim::testing
