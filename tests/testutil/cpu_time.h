// The CPU seconds this process has spent, in all its threads: what a bounded-time test
// measures, so that other work on a busy machine does not fail it (wall time would).
#pragma once

#include <time.h>

namespace harp::testing {

inline double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace harp::testing
