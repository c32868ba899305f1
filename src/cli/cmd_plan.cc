// `harp plan --job FILE`: build a plan for a job and print it as a table (or JSON).
#include "commands.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/uniform.h"
#include "table.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string job_file;
  std::string strategy;
  std::string output;
  bool json = false;
};

void print_plan_table(const plan::Plan& p, const cost::CostModel& costs, std::ostream& out) {
  Table t({"stage", "subcluster", "devices", "layers", "dp x tp", "N", "fwd", "bwd", "comm",
           "memory / usable"});
  for (int i = 0; i < p.num_stages(); ++i) {
    const auto& s = p.stages[i];
    const auto& dev = costs.cluster().device_of(s.subcluster);
    std::string devs = s.devices.empty() ? "-"
                       : s.devices.size() == 1
                           ? std::to_string(s.devices[0])
                           : fmt("%d-%d", s.devices.front(), s.devices.back());
    t.add({std::to_string(i), s.subcluster_name + " (" + dev.name + ")", devs,
           fmt("[%d, %d)", s.first_layer, s.last_layer), fmt("%d x %d", s.dp, s.tp),
           std::to_string(s.launch_count), fmt_time(s.fwd_s), fmt_time(s.bwd_s),
           i + 1 < p.num_stages() ? fmt_time(s.comm_s) : "-",
           fmt("%.1f / %.1f GiB", bytes_to_gib(s.memory_bytes),
               bytes_to_gib(cost::usable_memory_bytes(dev, costs.config())))});
  }
  t.print(out);
  const auto& pr = p.predicted;
  out << "\npredicted iteration: " << fmt_time(pr.iteration_s) << " = round trip "
      << fmt_time(pr.round_trip_s) << " + (B-1) x P " << fmt_time(pr.steady_s) << " + all-reduce "
      << fmt_time(pr.allreduce_s) << " + optimizer " << fmt_time(pr.optimizer_s) << "\n";
  out << "period P: " << fmt_time(pr.period_s) << "   bubble (closed form): "
      << fmt("%.1f%%", 100 * pr.bubble_fraction) << "\n";
}

int run_plan(const Opts& o, Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("plan", job.status());
  std::string strategy = o.strategy.empty() ? job->planner.strategy : o.strategy;
  cost::CostModel costs(job->cluster, job->model, nullptr, job->cost);
  planner::BuildOptions options;
  options.microbatches = job->planner.microbatches;
  options.microbatch_size = job->planner.microbatch_size;
  options.schedule = job->schedule;
  StatusOr<plan::Plan> p = Status(StatusCode::kInternal, "no strategy ran");
  if (strategy == "uniform") {
    p = planner::plan_uniform(costs, options);
  } else {
    ctx.err << "harp plan: strategy `" << strategy
            << "` is not available in this build yet; use --strategy uniform\n";
    return ctx.rc = kExitUsage;
  }
  if (!p.ok()) return ctx.fail("plan", p.status());
  Status memory = planner::check_memory(costs, *p);
  if (!o.output.empty()) {
    Status s = plan::save_plan(*p, o.output);
    if (!s.ok()) return ctx.fail("plan", s);
  }
  if (o.json) {
    ctx.out << plan::plan_to_json(*p).dump(2) << "\n";
  } else {
    ctx.out << "plan for " << job->model.gpt.name << " (k = " << job->model.gpt.granularity
            << ", " << job->model.num_layers() << " layers) on " << job->cluster.name
            << ", strategy " << strategy << ", schedule " << plan::schedule_kind_name(p->schedule)
            << ", B = " << p->microbatches << " x " << p->microbatch_size << " samples\n\n";
    print_plan_table(*p, costs, ctx.out);
    if (!o.output.empty()) ctx.out << "plan written to " << o.output << "\n";
  }
  if (!memory.ok()) {
    ctx.err << "harp plan: warning: the plan does not fit in memory: " << memory.message() << "\n";
    return ctx.rc = kExitInfeasible;
  }
  return kExitOk;
}

}  // namespace

void add_plan_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("plan", "Search a pipeline plan for a job");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--job", o->job_file, "Job file (YAML)")->required();
  cmd->add_option("--strategy", o->strategy, "uniform (default: the job's planner.strategy)")
      ->check(CLI::IsMember({"harp", "uniform", "homogeneous"}));
  cmd->add_option("--output", o->output, "Write the plan JSON here");
  cmd->add_flag("--json", o->json, "Print the plan JSON instead of the table");
  cmd->callback([o, &ctx] { ctx.rc = run_plan(*o, ctx); });
}

}  // namespace harp::cli
