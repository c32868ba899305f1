// The time the launcher and the elastic controller wait on, as a seam: the system's in a
// run, a fake one in tests, so their timeout logic is tested without sleeping.
#pragma once

namespace harp::launch {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds on a monotonic clock (intervals and deadlines).
  virtual double now_s() = 0;
  // Seconds since the Unix epoch (times written to files that other processes and
  // machines read).
  virtual double unix_s() = 0;
  // Waits `seconds` (a fake clock advances instead).
  virtual void sleep_s(double seconds) = 0;
  // The system's clocks: steady_clock, system_clock and a real sleep.
  static Clock& system();
};

}  // namespace harp::launch
