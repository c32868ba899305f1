// Problem construction (true and homogeneous views, lower bounds) and the strategies.
#include "harp/planner/strategies.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "harp/cost/efficiency.h"
#include "harp/planner/uniform.h"

namespace harp::planner {
namespace {

constexpr const char* kHomogeneousDevice = "homogeneous-view";

// A copy of `cluster` where every subcluster runs `device` (with `memory_gib`).
cluster::Cluster as_homogeneous(const cluster::Cluster& cluster, cluster::DeviceType device,
                                double memory_gib) {
  cluster::Cluster c = cluster;
  device.name = kHomogeneousDevice;
  device.memory_gib = memory_gib;
  c.devices[kHomogeneousDevice] = device;
  for (auto& s : c.subclusters) s.device = kHomogeneousDevice;
  return c;
}

double least_memory_gib(const cluster::Cluster& cluster) {
  double m = std::numeric_limits<double>::infinity();
  for (const auto& s : cluster.subclusters) m = std::min(m, cluster.devices.at(s.device).memory_gib);
  return m;
}

}  // namespace

std::unique_ptr<cost::LayerCostSource> layer_source(const model::ModelSpec& model, const cost::CostConfig& config,
                                                    const profile::ProfileDb* db) {
  if (db != nullptr) return std::make_unique<cost::ProfiledCosts>(model, *db, config, config.profile_file);
  return std::make_unique<cost::AnalyticCosts>(model, config);
}

PlanningProblem problem_from_model(const cluster::Cluster& cluster, const model::ModelSpec& model,
                                   const cost::CostConfig& config, const profile::ProfileDb* db,
                                   int microbatches, int microbatch_size, int max_tp,
                                   const cost::Calibration* calibration) {
  PlanningProblem p;
  p.microbatches = microbatches;
  p.model_name = model.gpt.name;
  p.model_fingerprint = model.fingerprint();
  p.granularity = model.gpt.granularity;
  p.model_config = model::model_to_json(model);
  std::unique_ptr<cost::LayerCostSource> base = layer_source(model, config, db);
  std::unique_ptr<cost::LayerCostSource> source;
  if (calibration != nullptr)
    source = std::make_unique<cost::CalibratedCosts>(*base, *calibration);
  else
    source = std::move(base);
  p.costs = StageCosts::build(cluster, *source, microbatch_size, max_tp, config);
  const cluster::DeviceType* slowest = nullptr;
  for (const auto& s : cluster.subclusters) {
    const auto& d = cluster.devices.at(s.device);
    if (slowest == nullptr || d.peak_tflops < slowest->peak_tflops) slowest = &d;
  }
  p.slowest_device = slowest->name;
  cluster::Cluster homo = as_homogeneous(cluster, *slowest, least_memory_gib(cluster));
  source->alias_device(kHomogeneousDevice, slowest->name);
  p.homogeneous = StageCosts::build(homo, *source, microbatch_size, max_tp, config);
  if (model.gpt.tied_embeddings) {
    // fp16 bytes, as every LayerBytes::param_bytes (model_spec.h).
    const Bytes tied = 2.0 * static_cast<double>(model.gpt.vocab) * static_cast<double>(model.gpt.hidden);
    p.costs.set_tied_param_bytes(tied);
    p.homogeneous.set_tied_param_bytes(tied);
  }
  // Every device at the rate the roofline prices it (cost/efficiency.h).
  double rate = 0;
  for (const auto& s : cluster.subclusters)
    rate += s.num_devices() * cost::compute_rate(cluster.devices.at(s.device), config).flops_per_s();
  const double flops = (1.0 + config.backward_factor) * model.fwd_flops_per_sample() *
                       microbatch_size * microbatches;
  p.lower_bound_s = flops / rate;
  p.lower_bound_rule = "total FLOPs / (sum of each device's peak x its compute efficiency)";
  return p;
}

StatusOr<PlanningProblem> problem_from_table(const cluster::Cluster& cluster, const CostTable& table,
                                             int microbatches, const std::string& table_file) {
  HARP_RETURN_IF_ERROR(cost::check_cost_table(table, cluster, table_file));
  PlanningProblem p;
  p.microbatches = microbatches;
  p.model_name = table_file;
  cost::CostConfig config;
  cost::TableCosts source(table.layers, table.times, table_file);
  p.costs = StageCosts::build(cluster, source, table.microbatch_size, source.max_tp(), config);
  // The slowest device type: the longest time for the whole model on one device.
  std::string slowest;
  Seconds slowest_s = -1;
  double throughput = 0;  // iterations per second of all devices together, perfectly balanced
  for (int sub = 0; sub < static_cast<int>(cluster.subclusters.size()); ++sub) {
    const Seconds one = p.costs.single_device_s(sub);
    if (one > slowest_s) {
      slowest_s = one;
      slowest = cluster.subclusters[sub].device;
    }
    double best_per_sample = std::numeric_limits<double>::infinity();
    for (const auto& [samples, t] : table.times.at(cluster.subclusters[sub].device)) {
      // Device-seconds per sample: tp devices work on the samples together.
      auto per_sample = [&, samples = samples](const cost::Times& times, int tp) {
        double total = 0;
        for (size_t i = 0; i < times.fwd_s.size(); ++i) total += times.fwd_s[i] + times.bwd_s[i];
        best_per_sample = std::min(best_per_sample, total * tp / samples);
      };
      per_sample(t, 1);
      for (const auto& [tp, times] : t.tp) per_sample(times, tp);
    }
    throughput += cluster.subclusters[sub].num_devices() /
                  (best_per_sample * table.microbatch_size * microbatches);
  }
  p.slowest_device = slowest;
  cluster::Cluster homo =
      as_homogeneous(cluster, cluster.devices.at(slowest), least_memory_gib(cluster));
  source.alias_device(kHomogeneousDevice, slowest);
  p.homogeneous = StageCosts::build(homo, source, table.microbatch_size, source.max_tp(), config);
  p.lower_bound_s = 1.0 / throughput;
  p.lower_bound_rule = "every device busy at its best per-sample time (perfect balance)";
  return p;
}

namespace {

std::vector<plan::Plan*> all_plans(StrategyResult& r) {
  std::vector<plan::Plan*> out = {&r.plan};
  for (plan::Plan& c : r.candidates) out.push_back(&c);
  return out;
}

}  // namespace

StrategyResult run_strategy(const PlanningProblem& problem, Strategy strategy,
                            const SearchOptions& options) {
  StrategyResult r;
  r.strategy = strategy;
  if (strategy == Strategy::kUniform) {
    BuildOptions build;
    build.microbatches = problem.microbatches;
    build.schedule = plan::ScheduleKind::k1F1B;
    // A forced recomputation mode applies to the baseline too; a per-stage choice is
    // the search's (the uniform baseline then recomputes nothing, Megatron's default).
    if (options.recompute.size() == 1) build.uniform_recompute = options.recompute[0];
    // ZeRO likewise: forced, it applies to the baseline's replicated stages too.
    if (options.zero.size() == 1) build.uniform_zero = options.zero[0];
    auto p = plan_uniform(problem.costs, build);
    if (!p.ok()) {
      r.reason = p.status().message();
      return r;
    }
    r.plan = *p;
  } else {
    SearchOptions o = options;
    o.microbatches = problem.microbatches;
    const bool harp = strategy == Strategy::kHarp;
    o.schedule = harp && options.schedule_in_search ? plan::ScheduleKind::kHarp1F1B : plan::ScheduleKind::k1F1B;
    const bool homogeneous = strategy == Strategy::kHomogeneous;
    auto found = search_pipeline(homogeneous ? problem.homogeneous : problem.costs, o);
    if (!found.ok()) {
      r.reason = found.status().message();
      return r;
    }
    r.stats = found->stats;
    if (!found->feasible) {
      r.reason = found->infeasible_reason;
      return r;
    }
    for (const auto& pl : found->placements)
      if (!problem.costs.has(pl.subcluster, pl.dp, pl.tp)) {
        r.reason = "its plan needs times for " + problem.costs.missing_entry(pl.subcluster, pl.dp, pl.tp);
        return r;
      }
    // The homogeneous search chose its placements on the wrong costs: the plan it is
    // judged by is those placements re-timed with the true costs. A harp search without
    // the schedule in the loop gets HARP's launch counts only now.
    const bool rebuild = harp && !options.schedule_in_search;
    if (homogeneous || rebuild) {
      BuildOptions build;
      build.microbatches = problem.microbatches;
      build.schedule = rebuild ? plan::ScheduleKind::kHarp1F1B : o.schedule;
      r.plan = build_plan(problem.costs, found->placements, build);
      if (rebuild) cap_launch_counts_to_memory(problem.costs, r.plan);
    } else {
      r.plan = std::move(found->plan);
      if (!found->candidates.empty())
        r.candidates.assign(std::make_move_iterator(found->candidates.begin() + 1),
                            std::make_move_iterator(found->candidates.end()));
    }
    r.plan.search_wall_s = found->stats.wall_s;
    for (plan::Plan& c : r.candidates) c.search_wall_s = found->stats.wall_s;
  }
  for (plan::Plan* p : all_plans(r)) {
    p->strategy = plan::strategy_name(strategy);
    p->model_name = problem.model_name;
    p->model_fingerprint = problem.model_fingerprint;
    p->granularity = problem.granularity;
    p->model_config = problem.model_config;
  }
  Status memory = check_memory(problem.costs, r.plan);
  if (!memory.ok()) {
    r.reason = memory.message();
    return r;
  }
  r.feasible = true;
  return r;
}

}  // namespace harp::planner
