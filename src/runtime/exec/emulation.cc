// An emulated slower device's compute time (emulation.h).
#include "harp/runtime/exec/emulation.h"

#include <time.h>

#include <algorithm>
#include <thread>

#include <ATen/Parallel.h>

namespace harp::runtime {
namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

ComputeStart start_compute() { return {std::chrono::steady_clock::now(), thread_cpu_s()}; }

double cpu_compute_seconds(const ComputeStart& start, double factor) {
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start.wall).count();
  const double needed = at::get_num_threads() == 1 ? std::min(wall, thread_cpu_s() - start.thread_cpu_s) : wall;
  return factor > 1.0 ? factor * needed : needed;
}

void finish_emulated_compute(const ComputeStart& start, double factor) {
  using Seconds = std::chrono::duration<double>;
  const double wall = Seconds(std::chrono::steady_clock::now() - start.wall).count();
  // In-run compute of the demo's slow pools measured +40-114% over their profile when
  // the sleep was (factor - 1) x the wall time: three ranks on two cores stretched the
  // wall time, and the factor multiplied the stretch (docs/testbed.md).
  const double needed = at::get_num_threads() == 1 ? std::min(wall, thread_cpu_s() - start.thread_cpu_s) : wall;
  if (factor > 1.0 && factor * needed > wall)
    std::this_thread::sleep_until(start.wall +
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(Seconds(factor * needed)));
}

}  // namespace harp::runtime
