// `harp plan`: its flags, planner::plan_job (or plan_tables) and planner/report.h's
// rendering of the outcome as a table or JSON (with --compare, the baselines beside it).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "harp/common/document.h"
#include "validators.h"
#include "harp/cluster/cluster_io.h"
#include "harp/common/format.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/plan_job.h"
#include "harp/planner/report.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string job_file, cluster_file, profile_file, calibrate_file;
  std::vector<std::string> costs_files;
  int global_batch = 0;
  std::string strategy;
  std::string microbatches;  // N or "auto"
  std::string granularity;   // k or "auto"
  // The search's settings: applied only when given (else the job's planner section).
  int max_tp = 0;
  bool allow_idle = false;
  bool fixed_order = true;
  bool mixed_stages = false;
  std::string search_schedule = "harp-1f1b";
  CLI::Option *max_tp_flag = nullptr, *allow_idle_flag = nullptr, *fixed_order_flag = nullptr,
              *search_schedule_flag = nullptr, *mixed_stages_flag = nullptr;
  std::string recompute;  // none | selective | full | auto; "" = the job's
  std::string zero;       // 0 | 1 | 2 | auto; "" = the job's
  std::string schedule;   // a schedule kind or auto; "" = the strategy's own
  bool compare = false;
  std::string output;
  bool json = false;
};

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
  if (o.max_tp_flag->count() > 0) r.max_tp = o.max_tp;
  if (o.allow_idle_flag->count() > 0) r.allow_idle_devices = o.allow_idle;
  if (o.fixed_order_flag->count() > 0) r.fixed_order = o.fixed_order;
  if (o.mixed_stages_flag->count() > 0) r.mixed_stages = o.mixed_stages;
  if (o.search_schedule_flag->count() > 0) r.schedule_in_search = o.search_schedule != "1f1b";
  if (!o.recompute.empty()) r.recompute = o.recompute;
  if (!o.zero.empty()) r.zero = o.zero;
  if (!o.schedule.empty()) r.schedule = o.schedule;
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

int run_plan(const Opts& o, Context& ctx) {
  const bool table_mode = !o.costs_files.empty() || !o.cluster_file.empty();
  if (!o.output.empty()) {
    std::vector<std::string> inputs = {o.job_file, o.cluster_file, o.profile_file, o.calibrate_file};
    inputs.insert(inputs.end(), o.costs_files.begin(), o.costs_files.end());
    if (Status s = check_output_path(o.output, inputs, "--output"); !s.ok()) return ctx.fail("plan", s);
  }
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
    if (o.compare && o.json) ctx.out << planner::compare_report_json(*c).dump(2) << "\n";
    if (o.compare && !o.json) planner::write_compare_report(*c, ctx.out);
    return ctx.rc = kExitInfeasible;
  }
  if (!o.output.empty()) {
    Status s = plan::save_plan(r.plan, o.output);
    if (!s.ok()) return ctx.fail("plan", s);
  }
  if (o.compare && o.json) ctx.out << planner::compare_report_json(*c).dump(2) << "\n";
  if (o.compare && !o.json) planner::write_compare_report(*c, ctx.out);
  if (o.compare) return kExitOk;
  if (o.json) {
    ctx.out << planner::plan_report_json(*c).dump(2) << "\n";
    return kExitOk;
  }
  planner::write_plan_report(*c, ctx.out);
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
      ->check(whole(1, 1 << 30));
  cmd->add_option("--profile", o->profile_file, "Profile DB (JSON) of measured layer times, with --job");
  cmd->add_option("--calibrate", o->calibrate_file,
                  "A run's measured_plan.json: scale the costs per device type to predict its stage times (--job)");
  cmd->add_option("--strategy", o->strategy, "harp, homogeneous or uniform (default: the job's, else harp)")
      ->check(CLI::IsMember({"harp", "uniform", "homogeneous"}));
  cmd->add_flag("--compare", o->compare, "Print harp, homogeneous and uniform side by side");
  cmd->add_option("--microbatches", o->microbatches, "Microbatches per iteration, or auto")
      ->check(whole_or_auto(1, 1 << 16));
  cmd->add_option("--granularity", o->granularity, "Sub-layers per block 1-4, or auto (--job only)")
      ->check(whole_or_auto(1, 4));
  o->max_tp_flag = cmd->add_option("--max-tp", o->max_tp, "Largest tensor-parallel degree (default: devices per node)")
      ->check(whole(1, 1024));
  o->allow_idle_flag = cmd->add_flag("--allow-idle-devices", o->allow_idle, "Let the plan leave devices unused");
  o->fixed_order_flag = cmd->add_option("--fixed-order", o->fixed_order, "Keep the subcluster order (false: search it)")
      ->capture_default_str();
  o->mixed_stages_flag =
      cmd->add_option("--mixed-stages", o->mixed_stages,
                      "Also search stages whose data-parallel replicas are of two device types (the rest of one "
                      "subcluster and the head of the next), each taking a share of every microbatch by its speed; "
                      "every device is used then. Default: the job's planner.mixed_stages, else false")
          ->capture_default_str();
  o->search_schedule_flag = cmd->add_option("--search-schedule", o->search_schedule,
                  "The schedule harp's search plans for: harp-1f1b (default), or 1f1b and then HARP's launch "
                  "counts (an ablation: the schedule out of the loop)")
      ->check(CLI::IsMember({"harp-1f1b", "1f1b"}));
  cmd->add_option("--recompute", o->recompute,
                  "Activation recomputation: none, selective or full on every stage, or auto (the search "
                  "picks per stage, time against memory). Default: the job's planner.recompute, else none")
      ->check(CLI::IsMember({"none", "selective", "full", "auto"}));
  cmd->add_option("--zero", o->zero,
                  "Sharded optimizer state on every stage with dp > 1: 0, 1 (Adam's moments over the stage's "
                  "replicas), 2 (and the gradients between steps), or auto (the search picks 0 or 1 per stage, "
                  "time against memory). Default: the job's planner.zero, else 0")
      ->check(CLI::IsMember({"0", "1", "2", "auto"}));
  std::vector<std::string> schedules = plan::schedule_kind_names();
  schedules.push_back("auto");
  cmd->add_option("--schedule", o->schedule,
                  "The plan's schedule: gpipe, 1f1b, harp-1f1b, zb-h1, zb-h2, harp-zb, or auto (the searched plan "
                  "simulated under 1f1b, harp-1f1b, zb-h1, zb-h2 and harp-zb; the fastest whose stages fit their "
                  "devices' memory). Default: harp-1f1b (the harp strategy)")
      ->check(CLI::IsMember(schedules));
  cmd->add_option("--output", o->output, "Write the plan JSON here");
  cmd->add_flag("--json", o->json, "Print JSON instead of tables");
  cmd->callback([o, &ctx] { ctx.rc = run_plan(*o, ctx); });
}

}  // namespace harp::cli
