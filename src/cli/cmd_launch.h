// `harp launch --elastic` (cmd_launch_elastic.cc): the launcher that re-plans when a
// device is lost.
#pragma once

#include <string>
#include <vector>

#include "commands.h"
#include "harp/launch/elastic.h"

namespace harp::cli {

// Plans the job, runs one worker per planned device with `--job JOB --plan PLAN`, and
// re-plans over the survivors when ranks are lost (launch::ElasticController, with the
// job's cluster and planner options). Returns the exit code.
int run_elastic(launch::ElasticOptions options, Context& ctx);

}  // namespace harp::cli
