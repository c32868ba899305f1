// `harp plan`: a thin wrapper around planner::plan_job / plan_tables that prints the
// chosen plan as a table or JSON, and with --compare puts the baselines beside it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>

#include "commands.h"
#include "harp/cluster/cluster_io.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/plan_job.h"
#include "harp/sim/run.h"
#include "table.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string job_file, cluster_file, profile_file, calibrate_file;
  std::vector<std::string> costs_files;
  int global_batch = 0;
  std::string strategy;
  std::string microbatches;  // N or "auto"
  std::string granularity;   // k or "auto"
  int max_tp = 0;
  bool allow_idle = false;
  bool fixed_order = true;
  std::string search_schedule = "harp-1f1b";
  std::string recompute;  // none | selective | full | auto; "" = the job's
  bool compare = false;
  std::string output;
  bool json = false;
};

void print_plan_table(const plan::Plan& p, const planner::StageCosts& costs, std::ostream& out) {
  Table t({"stage", "subcluster", "devices", "layers", "dp x tp", "recompute", "N", "fwd", "bwd", "comm",
           "memory / usable", "costs"});
  for (int i = 0; i < p.num_stages(); ++i) {
    const auto& s = p.stages[i];
    const auto& dev = costs.cluster().device_of(s.subcluster);
    std::string devs = s.devices.size() == 1 ? std::to_string(s.devices[0])
                                             : fmt("%d-%d", s.devices.front(), s.devices.back());
    t.add({std::to_string(i), s.subcluster_name + " (" + dev.name + ")", devs,
           fmt("[%d, %d)", s.first_layer, s.last_layer), fmt("%d x %d", s.dp, s.tp),
           recompute_name(s.recompute), std::to_string(s.launch_count), fmt_time(s.fwd_s), fmt_time(s.bwd_s),
           i + 1 < p.num_stages() ? fmt_time(s.comm_s) : "-",
           fmt("%.1f / %.1f GiB", bytes_to_gib(s.memory_bytes),
               bytes_to_gib(costs.usable_memory_bytes(s.subcluster))),
           s.cost_source});
  }
  t.print(out);
  const auto& pr = p.predicted;
  out << "\npredicted iteration: " << fmt_time(pr.iteration_s) << " = round trip "
      << fmt_time(pr.round_trip_s) << " + (B-1) x P " << fmt_time(pr.steady_s)
      << " + all-reduce and optimizer " << fmt_time(pr.end_s) << "\n";
  out << "period P: " << fmt_time(pr.period_s) << "   bubble (closed form): "
      << fmt("%.1f%%", 100 * pr.bubble_fraction) << "\n";
  if (!p.cost_source.empty()) out << "costs: " << p.cost_source << "\n";
}

// Parses "N" or "auto" (0); -1 on anything else.
int parse_count_or_auto(const std::string& s) {
  if (s == "auto") return 0;
  try {
    size_t used = 0;
    int v = std::stoi(s, &used);
    return used == s.size() && v >= 1 ? v : -1;
  } catch (...) {
    return -1;
  }
}

planner::ProgressFn progress_line() {
  // Long searches show progress on a terminal; pipes and tests stay quiet.
  if (!isatty(STDERR_FILENO)) return {};
  auto start = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  auto runs = std::make_shared<int>(0);
  return [start, runs](Seconds cap, long long states) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
    if (++*runs % 4 == 0 || elapsed > 1.0)
      std::fprintf(stderr, "\r  searching: %d DP runs, cap %s, %lld states, %.1f s   ", *runs,
                   fmt_time(cap).c_str(), states, elapsed);
  };
}

planner::PlanRequest request_of(const Opts& o, Context& ctx) {
  planner::PlanRequest r;
  if (!o.strategy.empty()) {
    plan::Strategy s;
    plan::parse_strategy(o.strategy, &s);  // CLI11 checked the name
    r.strategy = s;
  }
  if (!o.microbatches.empty()) r.microbatches = parse_count_or_auto(o.microbatches);
  if (!o.granularity.empty()) r.granularity = parse_count_or_auto(o.granularity);
  r.max_tp = o.max_tp;
  r.allow_idle_devices = o.allow_idle;
  r.fixed_order = o.fixed_order;
  r.schedule_in_search = o.search_schedule != "1f1b";
  if (!o.recompute.empty()) r.recompute = o.recompute;
  r.compare = o.compare;
  r.profile_file = o.profile_file;
  r.calibrate_file = o.calibrate_file;
  r.progress = progress_line();
  if (!o.json)
    r.on_candidate = [&ctx](const std::string& label, const planner::StrategyResult& res) {
      ctx.err << "  " << label << ": "
              << (res.feasible ? fmt_time(res.plan.predicted.iteration_s) : std::string("infeasible")) << "\n";
    };
  return r;
}

StatusOr<planner::PlanOutcome> plan_for(const Opts& o, Context& ctx) {
  const planner::PlanRequest request = request_of(o, ctx);
  if (o.costs_files.empty()) {
    HARP_ASSIGN_OR_RETURN(job::Job job, job::load_job(o.job_file));
    return planner::plan_job(job, request);
  }
  HARP_ASSIGN_OR_RETURN(cluster::Cluster cluster, cluster::load_cluster(o.cluster_file));
  std::vector<cost::CostTable> tables;
  for (const auto& f : o.costs_files) {
    HARP_ASSIGN_OR_RETURN(cost::CostTable t, cost::load_cost_table(f));
    tables.push_back(std::move(t));
  }
  const int b = o.microbatches.empty() ? 0 : parse_count_or_auto(o.microbatches);
  return planner::plan_tables(cluster, tables, o.costs_files, b, o.global_batch, request);
}

void print_stats(const planner::StrategyResult& r, std::ostream& out) {
  if (r.strategy == plan::Strategy::kUniform) return;
  out << "search: " << fmt("%.1f ms", r.stats.wall_s * 1e3) << ", " << r.stats.caps_evaluated
      << " of " << r.stats.caps_total << " candidate periods evaluated in " << r.stats.dp_runs << " DP runs, "
      << r.stats.states_visited
      << " DP states, " << r.stats.front_entries << " Pareto entries, " << r.stats.orders_tried
      << " subcluster order(s)\n";
}

int run_compare(const planner::PlanOutcome& c, const Opts& o, Context& ctx) {
  const std::vector<planner::StrategyResult>& results = c.compared;
  Json j = Json::array();
  Table t({"strategy", "stages", "schedule", "predicted", "simulated", "x lower bound", "harp speedup"});
  double harp_sim = 0;
  for (const auto& r : results) {
    const std::string name = plan::strategy_name(r.strategy);
    if (!r.feasible) {
      t.add({name, "-", "-", "infeasible", "-", "-", "-"});
      j.push_back({{"strategy", name}, {"feasible", false}, {"reason", r.reason}});
      continue;
    }
    auto run = sim::simulate_plan(r.plan, r.plan.schedule, {false});
    const double simulated = run.ok() ? run->result.iteration_s() : std::numeric_limits<double>::quiet_NaN();
    if (r.strategy == plan::Strategy::kHarp) harp_sim = simulated;
    t.add({name, std::to_string(r.plan.num_stages()), plan::schedule_kind_name(r.plan.schedule),
           fmt_time(r.plan.predicted.iteration_s), fmt_time(simulated),
           fmt("%.2f", simulated / c.problem.lower_bound_s),
           harp_sim > 0 ? fmt("%.2fx", simulated / harp_sim) : "-"});
    j.push_back({{"strategy", name},
                 {"feasible", true},
                 {"stages", r.plan.num_stages()},
                 {"predicted_s", r.plan.predicted.iteration_s},
                 {"simulated_s", simulated},
                 {"lower_bound_ratio", simulated / c.problem.lower_bound_s}});
  }
  if (o.json) {
    ctx.out << Json{{"lower_bound_s", c.problem.lower_bound_s},
                    {"lower_bound_rule", c.problem.lower_bound_rule},
                    {"strategies", j}}
                   .dump(2)
            << "\n";
    return kExitOk;
  }
  ctx.out << "\n";
  t.print(ctx.out);
  ctx.out << "\nlower bound: " << fmt_time(c.problem.lower_bound_s) << " (" << c.problem.lower_bound_rule
          << "); homogeneous plans as if every device were a " << c.problem.slowest_device
          << "; harp speedup = the strategy's simulated time / harp's\n";
  for (const auto& r : results)
    if (!r.feasible) ctx.out << plan::strategy_name(r.strategy) << " is infeasible: " << r.reason << "\n";
  return kExitOk;
}

int run_plan(const Opts& o, Context& ctx) {
  const bool table_mode = !o.costs_files.empty() || !o.cluster_file.empty();
  if (table_mode == !o.job_file.empty() || (table_mode && (o.costs_files.empty() || o.cluster_file.empty()))) {
    ctx.err << "harp plan: give either --job FILE, or --cluster FILE with --costs FILE... and --microbatches N "
               "or --global-batch G\n";
    return ctx.rc = kExitUsage;
  }
  if (table_mode && parse_count_or_auto(o.microbatches) < 1 && o.global_batch < 1) {
    ctx.err << "harp plan: --costs needs --microbatches N (N >= 1) or --global-batch G (B = G / each table's "
               "microbatch size)\n";
    return ctx.rc = kExitUsage;
  }
  if (table_mode && !o.granularity.empty()) {
    ctx.err << "harp plan: --granularity applies to --job only (a cost table fixes its layers)\n";
    return ctx.rc = kExitUsage;
  }
  if (table_mode && (!o.profile_file.empty() || !o.calibrate_file.empty())) {
    ctx.err << "harp plan: --profile and --calibrate apply to --job only (a cost table already gives every time)\n";
    return ctx.rc = kExitUsage;
  }
  if (!table_mode && o.global_batch > 0) {
    ctx.err << "harp plan: --global-batch applies to --costs only (a job gives planner.microbatches x "
               "planner.microbatch_size)\n";
    return ctx.rc = kExitUsage;
  }
  for (const auto& [flag, v] : {std::pair{"--microbatches", o.microbatches}, {"--granularity", o.granularity}})
    if (!v.empty() && parse_count_or_auto(v) < 0) {
      ctx.err << "harp plan: " << flag << " " << v << ": expected a positive integer or auto\n";
      return ctx.rc = kExitUsage;
    }
  auto c = plan_for(o, ctx);
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r\033[K");  // clear the progress line
  if (!c.ok()) return ctx.fail("plan", c.status());
  const auto& r = c->result;
  if (!r.feasible) {
    ctx.err << "harp plan: infeasible (" << plan::strategy_name(r.strategy) << "): " << r.reason << "\n";
    if (o.compare) run_compare(*c, o, ctx);
    return ctx.rc = kExitInfeasible;
  }
  plan::Plan p = r.plan;
  if (!o.output.empty()) {
    Status s = plan::save_plan(p, o.output);
    if (!s.ok()) return ctx.fail("plan", s);
  }
  if (o.compare) return run_compare(*c, o, ctx);
  if (o.json) {
    Json j = plan::plan_to_json(p);
    j["search"]["caps_total"] = r.stats.caps_total;
    j["search"]["caps_evaluated"] = r.stats.caps_evaluated;
    j["search"]["dp_runs"] = r.stats.dp_runs;
    j["search"]["dp_states"] = r.stats.states_visited;
    ctx.out << j.dump(2) << "\n";
    return kExitOk;
  }
  ctx.out << "plan (" << plan::strategy_name(r.strategy) << ", schedule " << plan::schedule_kind_name(p.schedule) << ") for "
          << p.model_name << (c->label.empty() ? "" : ", " + c->label) << ", B = " << p.microbatches
          << " microbatches of " << p.microbatch_size << "\n\n";
  print_plan_table(p, c->problem.costs, ctx.out);
  print_stats(r, ctx.out);
  if (!o.output.empty()) ctx.out << "plan written to " << o.output << "\n";
  return kExitOk;
}

}  // namespace

void add_plan_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("plan", "Search a pipeline plan");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--job", o->job_file, "Job file (YAML)");
  cmd->add_option("--cluster", o->cluster_file, "Cluster file, with --costs");
  cmd->add_option("--costs", o->costs_files,
                  "Explicit cost tables (JSON), with --cluster; several (one per microbatch size) are swept");
  cmd->add_option("--global-batch", o->global_batch, "Samples per iteration, with --costs: B = G / microbatch size")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--profile", o->profile_file, "Profile DB (JSON) of measured layer times, with --job");
  cmd->add_option("--calibrate", o->calibrate_file,
                  "A run's measured_plan.json: scale the costs per device type to predict its stage times (--job)");
  cmd->add_option("--strategy", o->strategy, "harp, homogeneous or uniform (default: the job's, else harp)")
      ->check(CLI::IsMember({"harp", "uniform", "homogeneous"}));
  cmd->add_flag("--compare", o->compare, "Print harp, homogeneous and uniform side by side");
  cmd->add_option("--microbatches", o->microbatches, "Microbatches per iteration, or auto");
  cmd->add_option("--granularity", o->granularity, "Sub-layers per block 1-4, or auto (--job only)");
  cmd->add_option("--max-tp", o->max_tp, "Largest tensor-parallel degree (default: devices per node)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--allow-idle-devices", o->allow_idle, "Let the plan leave devices unused");
  cmd->add_option("--fixed-order", o->fixed_order, "Keep the subcluster order (false: search it)")
      ->capture_default_str();
  cmd->add_option("--search-schedule", o->search_schedule,
                  "The schedule harp's search plans for: harp-1f1b (default), or 1f1b and then HARP's launch "
                  "counts (an ablation: the schedule out of the loop)")
      ->check(CLI::IsMember({"harp-1f1b", "1f1b"}));
  cmd->add_option("--recompute", o->recompute,
                  "Activation recomputation: none, selective or full on every stage, or auto (the search "
                  "picks per stage, time against memory). Default: the job's planner.recompute, else none")
      ->check(CLI::IsMember({"none", "selective", "full", "auto"}));
  cmd->add_option("--output", o->output, "Write the plan JSON here");
  cmd->add_flag("--json", o->json, "Print JSON instead of tables");
  cmd->callback([o, &ctx] { ctx.rc = run_plan(*o, ctx); });
}

}  // namespace harp::cli
