// `harp plan`: search a plan for a job (or a cluster + explicit cost table), print it as
// a table or JSON, and with --compare put the baselines beside it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>

#include "commands.h"
#include "harp/cluster/cluster_io.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/strategies.h"
#include "harp/sim/run.h"
#include "table.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string job_file, cluster_file, costs_file;
  std::string strategy;
  std::string microbatches;  // N or "auto"
  std::string granularity;   // k or "auto"
  int max_tp = 0;
  bool allow_idle = false;
  bool fixed_order = true;
  bool compare = false;
  std::string output;
  bool json = false;
};

// One candidate problem (a granularity and microbatch count) with its chosen result.
struct Candidate {
  planner::PlanningProblem problem;
  planner::StrategyResult result;
  std::string label;
};

void print_plan_table(const plan::Plan& p, const planner::StageCosts& costs, std::ostream& out) {
  Table t({"stage", "subcluster", "devices", "layers", "dp x tp", "N", "fwd", "bwd", "comm",
           "memory / usable"});
  for (int i = 0; i < p.num_stages(); ++i) {
    const auto& s = p.stages[i];
    const auto& dev = costs.cluster().device_of(s.subcluster);
    std::string devs = s.devices.size() == 1 ? std::to_string(s.devices[0])
                                             : fmt("%d-%d", s.devices.front(), s.devices.back());
    t.add({std::to_string(i), s.subcluster_name + " (" + dev.name + ")", devs,
           fmt("[%d, %d)", s.first_layer, s.last_layer), fmt("%d x %d", s.dp, s.tp),
           std::to_string(s.launch_count), fmt_time(s.fwd_s), fmt_time(s.bwd_s),
           i + 1 < p.num_stages() ? fmt_time(s.comm_s) : "-",
           fmt("%.1f / %.1f GiB", bytes_to_gib(s.memory_bytes),
               bytes_to_gib(costs.usable_memory_bytes(s.subcluster)))});
  }
  t.print(out);
  const auto& pr = p.predicted;
  out << "\npredicted iteration: " << fmt_time(pr.iteration_s) << " = round trip "
      << fmt_time(pr.round_trip_s) << " + (B-1) x P " << fmt_time(pr.steady_s)
      << " + all-reduce and optimizer " << fmt_time(pr.end_s) << "\n";
  out << "period P: " << fmt_time(pr.period_s) << "   bubble (closed form): "
      << fmt("%.1f%%", 100 * pr.bubble_fraction) << "\n";
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

planner::SearchOptions search_options(const Opts& o) {
  planner::SearchOptions s;
  // Long searches show progress on a terminal; pipes and tests stay quiet.
  if (isatty(STDERR_FILENO)) {
    auto start = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    auto runs = std::make_shared<int>(0);
    s.progress = [start, runs](Seconds cap, long long states) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
      if (++*runs % 4 == 0 || elapsed > 1.0)
        std::fprintf(stderr, "\r  searching: %d DP runs, cap %s, %lld states, %.1f s   ", *runs,
                     fmt_time(cap).c_str(), states, elapsed);
    };
  }
  s.max_tp = o.max_tp;
  s.allow_idle_devices = o.allow_idle;
  s.fixed_order = o.fixed_order;
  return s;
}

// Builds every candidate problem the options ask for (granularity and microbatch count
// may be "auto") and keeps the one where `strategy` is fastest.
StatusOr<Candidate> best_candidate(const Opts& o, const std::string& strategy, Context& ctx) {
  planner::SearchOptions search = search_options(o);
  if (!o.costs_file.empty()) {
    HARP_ASSIGN_OR_RETURN(cluster::Cluster cluster, cluster::load_cluster(o.cluster_file));
    HARP_ASSIGN_OR_RETURN(planner::CostTable table, planner::load_cost_table(o.costs_file));
    const int b = parse_count_or_auto(o.microbatches);
    HARP_ASSIGN_OR_RETURN(planner::PlanningProblem problem,
                          planner::problem_from_table(cluster, table, b, o.costs_file));
    Candidate c{problem, planner::run_strategy(problem, strategy, search), ""};
    return c;
  }
  HARP_ASSIGN_OR_RETURN(job::Job job, job::load_job(o.job_file));
  const int k_opt = o.granularity.empty() ? job.model.gpt.granularity : parse_count_or_auto(o.granularity);
  const int b_opt = o.microbatches.empty() ? job.planner.microbatches : parse_count_or_auto(o.microbatches);
  const int global_batch = job.planner.microbatches * job.planner.microbatch_size;
  std::vector<int> ks = k_opt == 0 ? std::vector<int>{1, 2, 3, 4} : std::vector<int>{k_opt};
  std::vector<int> bs;
  if (b_opt == 0) {
    for (int b = 1; b <= global_batch; b *= 2)
      if (global_batch % b == 0) bs.push_back(b);
  } else {
    if (global_batch % b_opt != 0 && !o.microbatches.empty())
      return invalid_argument("--microbatches " + o.microbatches + " does not divide the global batch of " +
                              std::to_string(global_batch) + " samples (planner.microbatches x " +
                              "planner.microbatch_size in " + o.job_file + "); use a divisor or auto");
    bs.push_back(b_opt);
  }
  int max_tp = 1;
  for (const auto& s : job.cluster.subclusters)
    while (max_tp * 2 <= s.devices_per_node) max_tp *= 2;
  if (o.max_tp > 0) max_tp = std::min(max_tp, o.max_tp);
  std::optional<Candidate> best;
  for (int k : ks) {
    model::GptConfig g = job.model.gpt;
    g.granularity = k;
    HARP_ASSIGN_OR_RETURN(model::ModelSpec m, model::build_gpt(g, job.file, "model"));
    for (int b : bs) {
      const int mbs = b_opt == 0 || !o.microbatches.empty() ? global_batch / b : job.planner.microbatch_size;
      planner::PlanningProblem problem =
          planner::problem_from_model(job.cluster, m, job.cost, nullptr, b, mbs, max_tp);
      planner::StrategyResult r = planner::run_strategy(problem, strategy, search);
      std::string label = ks.size() * bs.size() > 1 ? fmt("k = %d, B = %d x %d", k, b, mbs) : "";
      if (!label.empty() && !o.json)
        ctx.err << "  " << label << ": "
                << (r.feasible ? fmt_time(r.plan.predicted.iteration_s) : std::string("infeasible")) << "\n";
      const bool better = r.feasible && (!best || !best->result.feasible ||
                                         r.plan.predicted.iteration_s < best->result.plan.predicted.iteration_s);
      if (!best || better) best = Candidate{problem, r, label};
    }
  }
  return *best;
}

void print_stats(const planner::StrategyResult& r, std::ostream& out) {
  if (r.strategy == "uniform") return;
  out << "search: " << fmt("%.1f ms", r.stats.wall_s * 1e3) << ", " << r.stats.caps_evaluated
      << " of " << r.stats.caps_total << " candidate periods evaluated, " << r.stats.states_visited
      << " DP states, " << r.stats.front_entries << " Pareto entries, " << r.stats.orders_tried
      << " subcluster order(s)\n";
}

int run_compare(const Candidate& c, const Opts& o, Context& ctx) {
  std::vector<planner::StrategyResult> results;
  for (const char* s : {"harp", "homogeneous", "uniform"})
    results.push_back(s == std::string("harp") ? c.result
                                               : planner::run_strategy(c.problem, s, search_options(o)));
  Json j = Json::array();
  Table t({"strategy", "stages", "schedule", "predicted", "simulated", "x lower bound", "harp speedup"});
  double harp_sim = 0;
  for (const auto& r : results) {
    if (!r.feasible) {
      t.add({r.strategy, "-", "-", "infeasible", "-", "-", "-"});
      j.push_back({{"strategy", r.strategy}, {"feasible", false}, {"reason", r.reason}});
      continue;
    }
    auto run = sim::simulate_plan(r.plan, r.plan.schedule, {false});
    const double simulated = run.ok() ? run->result.iteration_s() : std::numeric_limits<double>::quiet_NaN();
    if (r.strategy == "harp") harp_sim = simulated;
    t.add({r.strategy, std::to_string(r.plan.num_stages()), plan::schedule_kind_name(r.plan.schedule),
           fmt_time(r.plan.predicted.iteration_s), fmt_time(simulated),
           fmt("%.2f", simulated / c.problem.lower_bound_s),
           harp_sim > 0 ? fmt("%.2fx", simulated / harp_sim) : "-"});
    j.push_back({{"strategy", r.strategy},
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
    if (!r.feasible) ctx.out << r.strategy << " is infeasible: " << r.reason << "\n";
  return kExitOk;
}

int run_plan(const Opts& o, Context& ctx) {
  const bool table_mode = !o.costs_file.empty() || !o.cluster_file.empty();
  if (table_mode == !o.job_file.empty() || (table_mode && (o.costs_file.empty() || o.cluster_file.empty()))) {
    ctx.err << "harp plan: give either --job FILE, or --cluster FILE with --costs FILE and --microbatches N\n";
    return ctx.rc = kExitUsage;
  }
  if (table_mode && parse_count_or_auto(o.microbatches) < 1) {
    ctx.err << "harp plan: --costs needs --microbatches N (N >= 1; auto needs a job's global batch)\n";
    return ctx.rc = kExitUsage;
  }
  if (table_mode && !o.granularity.empty()) {
    ctx.err << "harp plan: --granularity applies to --job only (a cost table fixes its layers)\n";
    return ctx.rc = kExitUsage;
  }
  for (const auto& [flag, v] : {std::pair{"--microbatches", o.microbatches}, {"--granularity", o.granularity}})
    if (!v.empty() && parse_count_or_auto(v) < 0) {
      ctx.err << "harp plan: " << flag << " " << v << ": expected a positive integer or auto\n";
      return ctx.rc = kExitUsage;
    }
  std::string strategy = o.strategy;
  if (strategy.empty() && !table_mode) {
    auto job = job::load_job(o.job_file);
    if (!job.ok()) return ctx.fail("plan", job.status());
    strategy = job->planner.strategy;
  }
  if (strategy.empty() || o.compare) strategy = o.compare ? "harp" : strategy.empty() ? "harp" : strategy;
  auto c = best_candidate(o, strategy, ctx);
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r\033[K");  // clear the progress line
  if (!c.ok()) return ctx.fail("plan", c.status());
  const auto& r = c->result;
  if (!r.feasible) {
    ctx.err << "harp plan: infeasible (" << r.strategy << "): " << r.reason << "\n";
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
    j["search"]["dp_states"] = r.stats.states_visited;
    ctx.out << j.dump(2) << "\n";
    return kExitOk;
  }
  ctx.out << "plan (" << r.strategy << ", schedule " << plan::schedule_kind_name(p.schedule) << ") for "
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
  cmd->add_option("--costs", o->costs_file, "Explicit cost table (JSON), with --cluster");
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
  cmd->add_option("--output", o->output, "Write the plan JSON here");
  cmd->add_flag("--json", o->json, "Print JSON instead of tables");
  cmd->callback([o, &ctx] { ctx.rc = run_plan(*o, ctx); });
}

}  // namespace harp::cli
