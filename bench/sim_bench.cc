// Simulator throughput: simulated actions per second on large lowered schedules
// (64 stages x 1024 microbatches, the scale the planner explores). Lowering and
// generation are outside the timed loop; spans are off, as in the planner's use.
#include <benchmark/benchmark.h>

#include "harp/plan/closed_form.h"
#include "harp/schedule/generators.h"
#include "harp/schedule/lowering.h"
#include "harp/sim/simulator.h"

namespace {

using harp::plan::Plan;

// Two subclusters of S/2 stages each, slightly uneven stage times and a slow link
// between the halves, so both the waiting and the queueing paths are exercised.
Plan make_plan(int stages, int microbatches) {
  Plan p;
  p.microbatches = microbatches;
  p.schedule = harp::plan::ScheduleKind::k1F1B;
  for (int i = 0; i < stages; ++i) {
    harp::plan::Stage s;
    s.subcluster_name = i < stages / 2 ? "a" : "b";
    s.fwd_s = 1e-3 * (1.0 + 0.05 * (i % 3));
    s.bwd_s = 2 * s.fwd_s;
    const bool cross = i == stages / 2 - 1;
    s.crosses_nodes = cross;
    s.comm_s = i == stages - 1 ? 0.0 : (cross ? 1e-3 : 5e-5);
    s.comm_latency_s = i == stages - 1 ? 0.0 : 1e-5;
    s.allreduce_s = 2e-3;
    s.optimizer_s = 1e-3;
    p.stages.push_back(s);
  }
  return p;
}

void run(benchmark::State& state, const std::vector<int>& launch_counts, const Plan& plan) {
  auto compute = harp::schedule::generate_with_launch_counts(plan.num_stages(),
                                                             plan.microbatches, launch_counts);
  if (!compute.ok()) return state.SkipWithError(compute.status().to_string().c_str());
  auto lowered = harp::schedule::lower(*compute);
  if (!lowered.ok()) return state.SkipWithError(lowered.status().to_string().c_str());
  harp::sim::SimOptions options;
  options.record_spans = false;
  std::size_t actions = 0;
  for (auto _ : state) {
    auto r = harp::sim::simulate(plan, *lowered, options);
    if (!r.ok()) return state.SkipWithError(r.status().to_string().c_str());
    actions = r->actions_executed;
    benchmark::DoNotOptimize(r->iteration_ns);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * actions));
  state.counters["actions"] = static_cast<double>(actions);
}

void BM_Simulate1F1B(benchmark::State& state, int stages, int microbatches) {
  const Plan plan = make_plan(stages, microbatches);
  run(state, harp::plan::standard_launch_counts(stages, microbatches, plan.schedule), plan);
}

void BM_SimulateHarp1F1B(benchmark::State& state, int stages, int microbatches) {
  const Plan plan = make_plan(stages, microbatches);
  const auto period = harp::plan::closed_form(plan).period_s;
  run(state, harp::plan::delta_rule_launch_counts(plan, period), plan);
}

void BM_Simulate1F1B_64x1024(benchmark::State& s) { BM_Simulate1F1B(s, 64, 1024); }
void BM_SimulateHarp1F1B_64x1024(benchmark::State& s) { BM_SimulateHarp1F1B(s, 64, 1024); }
void BM_Simulate1F1B_8x64(benchmark::State& s) { BM_Simulate1F1B(s, 8, 64); }
void BM_SimulateHarp1F1B_8x64(benchmark::State& s) { BM_SimulateHarp1F1B(s, 8, 64); }

BENCHMARK(BM_Simulate1F1B_64x1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateHarp1F1B_64x1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate1F1B_8x64)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SimulateHarp1F1B_8x64)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
