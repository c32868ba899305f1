// The planning recipe (see plan_job.h).
#include "harp/planner/plan_job.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "harp/plan/plan_io.h"
#include "harp/profile/profile_db.h"

namespace harp::planner {
namespace {

std::string label_of(int k, int b, int mbs) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "k = %d, B = %d x %d", k, b, mbs);
  return buf;
}

// The request's settings over the job's planner section (cost tables: its defaults).
SearchOptions search_options(const PlanRequest& r, const job::PlannerConfig& job = {}) {
  SearchOptions s;
  HARP_CHECK(parse_recompute_policy(r.recompute.value_or(job.recompute), &s.recompute))
      << "recomputation policy " << r.recompute.value_or(job.recompute);
  HARP_CHECK(parse_zero_policy(r.zero.value_or(job.zero), &s.zero)) << "ZeRO policy " << r.zero.value_or(job.zero);
  s.max_tp = r.max_tp.value_or(job.max_tp);
  s.allow_idle_devices = r.allow_idle_devices.value_or(job.allow_idle_devices);
  s.fixed_order = r.fixed_order.value_or(job.fixed_order);
  s.mixed_stages = r.mixed_stages.value_or(job.mixed_stages);
  s.schedule_in_search = r.schedule_in_search.value_or(job.schedule_in_search);
  s.progress = r.progress;
  if (r.schedule) s.candidates = kScheduleCandidates;
  return s;
}

bool faster(const StrategyResult& a, const StrategyResult& b) {
  if (a.judged_s > 0 && b.judged_s > 0 && a.feasible && b.feasible) return a.judged_s < b.judged_s;
  return a.feasible && (!b.feasible || a.plan.predicted.iteration_s < b.plan.predicted.iteration_s);
}

// --schedule: weighs the requested kinds on the harp search's plans (its answer and the
// other plans it met) and keeps the fastest pair that fits (schedule_choice.h); none
// fitting makes the result infeasible.
void choose_schedule(const PlanRequest& r, const PlanningProblem& problem, StrategyResult* result) {
  if (!r.schedule || !result->feasible || result->strategy != Strategy::kHarp) return;
  std::vector<plan::ScheduleKind> kinds;
  plan::ScheduleKind kind;
  if (*r.schedule == "auto")
    kinds = auto_schedule_kinds();
  else if (plan::parse_schedule_kind(*r.schedule, &kind))
    kinds = {kind};
  HARP_CHECK(!kinds.empty()) << "schedule " << *r.schedule;  // the CLI checked the name
  std::vector<plan::Plan> plans = {result->plan};
  plans.insert(plans.end(), result->candidates.begin(), result->candidates.end());
  PairChoice pair = fastest_pair(plans, problem.costs, kinds);
  result->schedules = std::move(pair.options);
  result->candidates.clear();
  const std::optional<ScheduleOption> best = fastest_fitting(result->schedules);
  if (!best) {
    result->feasible = false;
    result->reason = "no schedule fits the searched plan's devices: " + describe_options(result->schedules) +
                     "; allow another schedule (--schedule auto), use more devices or recomputation";
    return;
  }
  if (pair.plan > 0) result->plan = std::move(plans[pair.plan]);
  result->plans_weighed = pair.weighed;
  adopt_schedule(&result->plan, *best);
  result->judged_s = best->simulated_s;
}

// Keeps the faster of `best` and the new candidate; ties keep the earlier one.
void keep_best(std::optional<PlanOutcome>& best, PlanningProblem problem, StrategyResult result,
               std::string label) {
  if (best && !faster(result, best->result)) return;
  best = PlanOutcome{std::move(problem), std::move(result), std::move(label), {}};
}

void finish(PlanOutcome& o, const PlanRequest& r, const job::PlannerConfig& job = {}) {
  if (!r.compare) return;
  const SearchOptions search = search_options(r, job);
  for (Strategy s : plan::kAllStrategies)
    o.compared.push_back(s == o.result.strategy ? o.result : run_strategy(o.problem, s, search));
}

}  // namespace

namespace {

// The factors that make this job's cost source predict a run's measured stage times.
StatusOr<cost::Calibration> calibration_of(const job::Job& job, const model::ModelSpec& m,
                                           const cost::CostConfig& config, const profile::ProfileDb* db,
                                           const std::string& file) {
  HARP_ASSIGN_OR_RETURN(plan::Plan measured, plan::load_plan(file));
  if (!measured.model_fingerprint.empty() && measured.model_fingerprint != m.fingerprint())
    return invalid_argument(shown_path(file) + ": the run trained another model (or granularity) than " + job.file +
                            " describes; calibrate with the measured_plan.json of a run of this model");
  std::vector<cost::MeasuredStage> stages;
  for (size_t i = 0; i < measured.stages.size(); ++i) {
    const plan::Stage& st = measured.stages[i];
    int sub = -1;
    for (size_t j = 0; j < job.cluster.subclusters.size(); ++j)
      if (job.cluster.subclusters[j].name == st.subcluster_name) sub = static_cast<int>(j);
    if (sub < 0)
      return invalid_argument(shown_path(file) + ": stage " + std::to_string(i) + " ran on subcluster `" +
                              st.subcluster_name + "`, which the cluster of " + job.file +
                              " does not have; calibrate with a run on this cluster");
    const int layers = static_cast<int>(m.layers.size());
    if (st.first_layer < 0 || st.last_layer > layers)
      return invalid_argument(shown_path(file) + ": stage " + std::to_string(i) + " ran layers [" +
                              std::to_string(st.first_layer) + ", " + std::to_string(st.last_layer) + "), but the model of " +
                              job.file + " has " + std::to_string(layers) +
                              " layers at its granularity; calibrate with the measured_plan.json of a run of this model");
    // The stage's subcluster is its first replica's. A mixed stage's times are its slowest
    // replica's: its first replica's are its measured forward + backward, split as the
    // stage's, at its own share.
    const bool mixed = st.mixed() && !st.replica_compute_s.empty() && st.fwd_s + st.bwd_s > 0;
    const double scale = mixed ? st.replica_compute_s[0] / (st.fwd_s + st.bwd_s) : 1.0;
    const int samples = !st.shares.empty() ? st.shares[0] : measured.microbatch_size / std::max(1, st.dp);
    stages.push_back({sub, st.first_layer, st.last_layer, samples, st.fwd_s * scale, st.bwd_s * scale, st.recompute});
  }
  auto source = layer_source(m, config, db);
  return cost::calibrate(*source, job.cluster, stages, file);
}

}  // namespace

int max_tp_for(const cluster::Cluster& cluster, int max_tp) {
  int tp = 1;
  for (const auto& s : cluster.subclusters)
    while (tp * 2 <= s.devices_per_node) tp *= 2;
  return max_tp > 0 ? std::min(tp, max_tp) : tp;
}

StatusOr<PlanOutcome> plan_job(const job::Job& job, const PlanRequest& asked) {
  // The job's `schedule.kind`, when the file gives one, is --schedule's default.
  PlanRequest request = asked;
  if (!request.schedule && !job.schedule.empty()) request.schedule = job.schedule;
  const Strategy strategy = request.compare ? Strategy::kHarp : request.strategy.value_or(job.planner.strategy);
  const std::string profile_file = request.profile_file.empty() ? job.cost.profile_file : request.profile_file;
  std::optional<profile::ProfileDb> db;
  if (!profile_file.empty()) {
    HARP_ASSIGN_OR_RETURN(profile::ProfileDb loaded, profile::load_profile_db(profile_file));
    db = std::move(loaded);
  }
  cost::CostConfig config = job.cost;
  config.profile_file = profile_file;

  const int global_batch = job.planner.microbatches * job.planner.microbatch_size;
  const int k_opt = request.granularity.value_or(job.model.gpt.granularity);
  std::vector<int> ks = k_opt == 0 ? std::vector<int>{1, 2, 3, 4} : std::vector<int>{k_opt};
  // (B, microbatch size) candidates.
  std::vector<std::pair<int, int>> bs;
  if (!request.microbatches) {
    bs.emplace_back(job.planner.microbatches, job.planner.microbatch_size);
  } else if (*request.microbatches == 0) {
    for (int b = 1; b <= global_batch; b *= 2)
      if (global_batch % b == 0) bs.emplace_back(b, global_batch / b);
  } else {
    const int b = *request.microbatches;
    if (b < 1 || global_batch % b != 0)
      return invalid_argument("microbatches " + std::to_string(b) + " does not divide the global batch of " +
                              std::to_string(global_batch) + " samples (planner.microbatches x " +
                              "planner.microbatch_size in " + job.file + "); use a divisor or auto");
    bs.emplace_back(b, global_batch / b);
  }
  // No higher than the model splits evenly (Qwen2.5-7B's 28 heads and 4 key/value heads: 4).
  const int max_tp = std::min(max_tp_for(job.cluster, request.max_tp.value_or(job.planner.max_tp)),
                              model::max_tensor_parallel(job.model.gpt));
  const bool sweep = ks.size() * bs.size() > 1;
  const SearchOptions search = search_options(request, job.planner);
  HARP_RETURN_IF_ERROR(check_order_search(job.cluster, search.fixed_order));
  std::optional<PlanOutcome> best;
  for (int k : ks) {
    model::GptConfig g = job.model.gpt;
    g.granularity = k;
    HARP_ASSIGN_OR_RETURN(model::ModelSpec m, model::build_gpt(g, job.file, "model"));
    if (db) HARP_RETURN_IF_ERROR(cost::ProfiledCosts::check(*db, m, job.cluster, config::name_of(job.training.dtype), profile_file));
    std::optional<cost::Calibration> calibration;
    if (!request.calibrate_file.empty()) {
      HARP_ASSIGN_OR_RETURN(calibration, calibration_of(job, m, config, db ? &*db : nullptr, request.calibrate_file));
    }
    for (auto [b, mbs] : bs) {
      PlanningProblem problem =
          problem_from_model(job.cluster, m, config, db ? &*db : nullptr, b, mbs, max_tp,
                             calibration ? &*calibration : nullptr);
      StrategyResult r = run_strategy(problem, strategy, search);
      choose_schedule(request, problem, &r);
      const std::string label = sweep ? label_of(k, b, mbs) : "";
      if (sweep && request.on_candidate) request.on_candidate(label, r);
      keep_best(best, std::move(problem), std::move(r), label);
    }
  }
  finish(*best, request, job.planner);
  return std::move(*best);
}

StatusOr<PlanOutcome> plan_tables(const cluster::Cluster& cluster,
                                  const std::vector<cost::CostTable>& tables,
                                  const std::vector<std::string>& files, int microbatches,
                                  int global_batch, const PlanRequest& request) {
  HARP_CHECK(!tables.empty() && tables.size() == files.size());
  HARP_CHECK(microbatches > 0 || global_batch > 0);
  const Strategy strategy = request.compare ? Strategy::kHarp : request.strategy.value_or(Strategy::kHarp);
  const SearchOptions search = search_options(request);
  HARP_RETURN_IF_ERROR(check_order_search(cluster, search.fixed_order));
  const bool sweep = tables.size() > 1;
  std::optional<PlanOutcome> best;
  std::string skipped;
  for (size_t i = 0; i < tables.size(); ++i) {
    const int mbs = tables[i].microbatch_size;
    if (microbatches <= 0 && global_batch % mbs != 0) {
      skipped += (skipped.empty() ? "" : ", ") + files[i] + " (microbatch size " + std::to_string(mbs) + ")";
      continue;
    }
    const int b = microbatches > 0 ? microbatches : global_batch / mbs;
    HARP_ASSIGN_OR_RETURN(PlanningProblem problem, problem_from_table(cluster, tables[i], b, files[i]));
    StrategyResult r = run_strategy(problem, strategy, search);
    choose_schedule(request, problem, &r);
    const std::string label = sweep ? files[i] + ": B = " + std::to_string(b) + " x " + std::to_string(mbs) : "";
    if (sweep && request.on_candidate) request.on_candidate(label, r);
    keep_best(best, std::move(problem), std::move(r), label);
  }
  if (!best)
    return invalid_argument("the global batch of " + std::to_string(global_batch) +
                            " samples is not a multiple of the microbatch size of any cost table: " + skipped +
                            "; use a global batch they divide");
  finish(*best, request);
  return std::move(*best);
}

}  // namespace harp::planner
