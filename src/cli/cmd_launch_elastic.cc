// `harp launch --elastic --job JOB -- harp train [flags]`: the job's cluster and planner
// handed to the elastic controller (harp/launch/elastic.h), which plans, launches and
// re-plans when devices are lost or re-admitted.
#include "cmd_launch.h"
#include "harp/job/job.h"
#include "harp/launch/elastic.h"
#include "harp/planner/plan_job.h"

namespace harp::cli {

int run_elastic(launch::ElasticOptions o, Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("launch", job.status());
  o.out_dir = job->training.out;  // unless the worker command has --out
  o.report_wait_s = 2 * job->training.timeout_s + o.grace_s + 5;
  // The planner with the job's options, over whatever cluster is left.
  auto plan = [&job](const cluster::Cluster& c) -> StatusOr<launch::PlanAttempt> {
    job->cluster = c;
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
