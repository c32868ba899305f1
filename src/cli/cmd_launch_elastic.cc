// `harp launch --elastic --job JOB -- harp train [flags]`: the job's cluster and planner
// handed to the elastic controller (harp/launch/elastic.h), which plans, launches and
// re-plans when devices are lost or re-admitted.
#include "cmd_launch.h"
#include "harp/cluster/cluster_io.h"
#include "harp/common/exit_code.h"
#include "harp/common/parse.h"
#include "harp/job/job.h"
#include "harp/launch/elastic.h"
#include "harp/planner/plan_job.h"
#include "harp/testbed/launch_ranks.h"
#include "harp/testbed/testbed.h"

namespace harp::cli {

int run_elastic(launch::ElasticOptions o, const std::string& testbed_file, const std::string& prefix, double packet_us,
                Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("launch", job.status());
  std::string owned;  // the testbed this launch brought up
  if (!testbed_file.empty()) {
    auto c = cluster::load_cluster(testbed_file);
    if (!c.ok()) return ctx.fail("launch", c.status());
    if (c->fingerprint() != job->cluster.fingerprint()) {
      ctx.err << "harp launch: --testbed " << testbed_file << " is not the cluster of " << o.job_file
              << " (fingerprints " << c->fingerprint() << " and " << job->cluster.fingerprint()
              << "); give the job's cluster file\n";
      return ctx.rc = kExitUsage;
    }
    auto t = testbed::topology_for(*c, prefix, packet_us);
    if (!t.ok()) return ctx.fail("launch", t.status());
    o.place = [c = *c, t = *t, &owned](const std::vector<int>& devices,
                                       launch::LaunchOptions* options) -> StatusOr<std::string> {
      HARP_ASSIGN_OR_RETURN(testbed::RankPlacement placed, testbed::place_ranks(c, t, devices, options));
      if (!placed.testbed) return "note: no testbed (" + placed.unavailable + "); the ranks talk over 127.0.0.1, unshaped";
      if (placed.brought_up) owned = t.prefix;
      return "testbed " + t.prefix + ": ranks " + placed.map;
    };
  }
  struct TakeDown {
    const std::string& prefix;
    Context& ctx;
    ~TakeDown() {
      if (prefix.empty()) return;
      auto removed = testbed::down(prefix);
      if (!removed.ok()) ctx.err << "harp launch: taking the testbed down: " << removed.status().message() << "\n";
    }
  } take_down{owned, ctx};
  o.out_dir = job->training.out;  // unless the worker command has --out
  o.report_wait_s = 2 * job->training.timeout_s + o.grace_s + 5;
  // The planner with the job's options, over whatever cluster is left.
  const config::TrainConfig& t = job->training;
  o.steps = t.steps;
  o.checkpoint_every = t.checkpoint_every;
  o.drift_threshold = t.drift_threshold;
  o.drift_window = t.drift_window;
  if (o.replan_min_gain < 0) o.replan_min_gain = t.replan_min_gain;  // no --replan-min-gain
  // The worker command's flags override the job's, for the workers and so here.
  for (auto [flag, value] : {std::pair{"--steps", &o.steps}, {"--checkpoint-every", &o.checkpoint_every},
                             {"--drift-window", &o.drift_window}})
    if (auto v = parse_integer(launch::flag_value(o.command, flag), 0, 1 << 30); v.ok()) *value = static_cast<int>(*v);
  if (auto v = parse_real(launch::flag_value(o.command, "--drift-threshold")); v.ok()) o.drift_threshold = *v;
  // The links a plan routes around are probed: the job's interval, else every two drift
  // windows (a command's own --link-probe-every is left as it is).
  o.link_probe_every = t.link_probe_every > 0 ? t.link_probe_every : 2 * std::max(1, o.drift_window);
  if (o.replan_min_gain > 0 && o.drift_threshold <= 1) {
    ctx.err << "harp launch: re-planning on drift (--replan-min-gain " << o.replan_min_gain
            << ") needs the workers' drift detection: set training.drift_threshold in " << o.job_file
            << " or pass --drift-threshold (e.g. 1.5) to harp train\n";
    return ctx.rc = kExitUsage;
  }
  if (o.replan_min_gain > 0 && o.nnodes > 1) {
    ctx.err << "harp launch: re-planning on drift runs on one machine; leave out --replan-min-gain with --nnodes\n";
    return ctx.rc = kExitUsage;
  }
  auto plan = [&job](const cluster::Cluster& c, const launch::ComputeDrift& drift) -> StatusOr<launch::PlanAttempt> {
    job->cluster = c;
    job->cost.compute_drift = drift;
    HARP_ASSIGN_OR_RETURN(planner::PlanOutcome outcome, planner::plan_job(*job, planner::PlanRequest{}));
    return launch::PlanAttempt{outcome.result.feasible, outcome.result.reason, outcome.result.plan};
  };
  auto reread = [&o]() -> StatusOr<cluster::Cluster> {
    HARP_ASSIGN_OR_RETURN(job::Job again, job::load_job(o.job_file));
    return again.cluster;
  };
  launch::ElasticController controller(o, job->cluster, plan, reread, launch::Launcher::local(),
                                       launch::Clock::system());
  return ctx.rc = documented_exit(controller.run(ctx.out, ctx.err));
}

}  // namespace harp::cli
