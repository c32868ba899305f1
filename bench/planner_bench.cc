// Planner speed on the paper's settings and at scale: wall time of the exact search
// (search_pipeline with HARP's schedule) for a job, cost tables built outside the loop.
//   GPT-2.6B k=2 on 1x8 V100 + 2x2 A100          target < 50 ms
//   GPT-6.7B k=3 on V100x8 | A100x2 | A100x2      target < 50 ms
//   GPT-76B  k=4 on 1024 GPUs in 4 subclusters    target < 10 s
//   the same after losing one H100 node (1016 GPUs: elastic re-planning)   target < 1 s
//   the 1024-GPU job with mixed stages searched too (both searches)        target < 1 s
// The 1024-GPU cases run on 1 core and on every core (Arg: threads, 0 = all), side by
// side, so their ratio is measured in one run.
#include <benchmark/benchmark.h>

#include <string>

#include "harp/job/job.h"
#include "harp/planner/strategies.h"

namespace {

void plan_job(benchmark::State& state, const std::string& job_file, harp::plan::Strategy strategy,
              int threads = 0, int lose_nodes = 0, bool mixed_stages = false) {
  auto job = harp::job::load_job(std::string(HARP_SOURCE_DIR) + "/examples/jobs/" + job_file);
  if (!job.ok()) return state.SkipWithError(job.status().to_string().c_str());
  job->cluster.subclusters[0].nodes -= lose_nodes;  // a lost node of the first subcluster
  auto problem = harp::planner::problem_from_model(job->cluster, job->model, job->cost, nullptr,
                                                   job->planner.microbatches,
                                                   job->planner.microbatch_size, 8);
  double t = 0;
  harp::planner::SearchStats stats;
  for (auto _ : state) {
    harp::planner::SearchOptions options;
    options.threads = threads;
    options.mixed_stages = mixed_stages;
    auto r = harp::planner::run_strategy(problem, strategy, options);
    if (!r.feasible) return state.SkipWithError(r.reason.c_str());
    t = r.plan.predicted.iteration_s;
    stats = r.stats;
  }
  state.counters["iteration_s"] = t;
  state.counters["caps"] = static_cast<double>(stats.caps_evaluated);
  state.counters["dp_runs"] = static_cast<double>(stats.dp_runs);
  state.counters["dp_states"] = static_cast<double>(stats.states_visited);
  state.counters["entries"] = static_cast<double>(stats.front_entries);
}

void BM_Harp_Gpt2_6B_Paper(benchmark::State& s) { plan_job(s, "paper_gpt2.6b.yaml", harp::plan::Strategy::kHarp); }
void BM_Harp_Gpt6_7B_ThreeSubclusters(benchmark::State& s) { plan_job(s, "paper_gpt6.7b.yaml", harp::plan::Strategy::kHarp); }
void BM_Harp_Gpt76B_1024Gpus(benchmark::State& s) {
  plan_job(s, "gpt76b_1024.yaml", harp::plan::Strategy::kHarp, static_cast<int>(s.range(0)));
}
void BM_Harp_Gpt76B_Replan_1016Gpus(benchmark::State& s) {
  plan_job(s, "gpt76b_1024.yaml", harp::plan::Strategy::kHarp, static_cast<int>(s.range(0)), 1);
}
void BM_Harp_Gpt76B_1024Gpus_MixedStages(benchmark::State& s) {
  plan_job(s, "gpt76b_1024.yaml", harp::plan::Strategy::kHarp, static_cast<int>(s.range(0)), 0, true);
}
void BM_Homogeneous_Gpt2_6B_Paper(benchmark::State& s) { plan_job(s, "paper_gpt2.6b.yaml", harp::plan::Strategy::kHomogeneous); }

BENCHMARK(BM_Harp_Gpt2_6B_Paper)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Harp_Gpt6_7B_ThreeSubclusters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Harp_Gpt76B_1024Gpus)->Unit(benchmark::kMillisecond)->Iterations(1)->Arg(1)->Arg(0);
BENCHMARK(BM_Harp_Gpt76B_Replan_1016Gpus)->Unit(benchmark::kMillisecond)->Iterations(1)->Arg(1)->Arg(0);
BENCHMARK(BM_Harp_Gpt76B_1024Gpus_MixedStages)->Unit(benchmark::kMillisecond)->Iterations(1)->Arg(1)->Arg(0);
BENCHMARK(BM_Homogeneous_Gpt2_6B_Paper)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
