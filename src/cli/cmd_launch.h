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
// job's cluster and planner options). With `testbed_file` (the job's cluster) each
// attempt's ranks run in their devices' namespaces of that testbed (`prefix`, or the
// cluster's default), brought up if it is not (its packets `packet_us` long) and then
// taken down at the end. Returns the exit code.
int run_elastic(launch::ElasticOptions options, const std::string& testbed_file, const std::string& prefix,
                double packet_us, Context& ctx);

// harp launch's exit code for a worker's (docs/errors.md): a documented code of harp's
// own (1-4) passes through; any other status (127: command not found; 128 + N: killed by
// signal N) is 1, the failure itself named in the launcher's summary line.
int documented_exit(int worker_code);

}  // namespace harp::cli
