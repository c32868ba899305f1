// An emulated slower device (DESIGN.md, "Testing heterogeneity without a heterogeneous
// cluster"): a device type with emulated_slowdown f > 1 is busy f times what a compute
// needed on this machine. What it needed is the computing thread's CPU time when the
// compute runs on that one thread (one compute thread, the testbed's setting): ranks that
// outnumber the cores wait for a core in the middle of a compute, and that wait then falls
// inside the emulated time instead of being multiplied by f. With several compute threads
// the wall time stands for it (their CPU time would count every thread's spinning).
// Used alike by the runtime's executor and the profiler, so a profile and a run agree.
#pragma once

#include <chrono>

namespace harp::runtime {

struct ComputeStart {
  std::chrono::steady_clock::time_point wall;
  double thread_cpu_s = 0;  // the calling thread's CPU clock then
};

// Call on the thread that computes, right before the compute.
ComputeStart start_compute();

// After the compute (on the same thread): sleeps until factor × what it needed has passed
// since `start` (nothing when factor <= 1 or the compute already took longer).
void finish_emulated_compute(const ComputeStart& start, double factor);

// What a CPU compute needed since `start`, as an emulated device of `factor` takes it:
// with one compute thread, the thread's CPU time (at most the wall time), so that other
// processes on the machine do not lengthen a measurement (the profiler's layer times on a
// busy machine moved by up to 1.9x); with more threads, the wall time. Times `factor`
// where it is above 1. Not for GPU work (the host thread waits for the device).
double cpu_compute_seconds(const ComputeStart& start, double factor);

}  // namespace harp::runtime
