// The project's units, defined once (STYLE habit 7). Every variable, field and key that
// holds a quantity carries its unit as a suffix; conversions happen at I/O boundaries
// through the helpers below and nowhere else.
#pragma once

#include <cmath>
#include <cstdint>

namespace harp {

using Seconds = double;        // cost model and plan times (_s)
using Nanos = std::int64_t;    // simulator time (_ns), integer so events order exactly
using Bytes = double;          // byte counts in the cost model (_bytes); exact below 2^53
using Flops = double;          // floating-point operations (_flops)
using BytesPerSecond = double; // bandwidth (_bytes_per_s)

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;

// Link bandwidths in files are Gbit/s (`bandwidth_gbps`): 1 Gbit/s = 1e9/8 bytes/s.
inline BytesPerSecond gbps_to_bytes_per_s(double gbps) { return gbps * 1e9 / 8.0; }
// Memory bandwidths in files are GB/s (`memory_bandwidth_gbs`).
inline BytesPerSecond gbs_to_bytes_per_s(double gbs) { return gbs * 1e9; }
inline double tflops_to_flops_per_s(double tflops) { return tflops * 1e12; }
inline Bytes gib_to_bytes(double gib) { return gib * kGiB; }
inline double bytes_to_gib(Bytes b) { return b / kGiB; }
inline Seconds us_to_s(double us) { return us * 1e-6; }
inline Seconds ms_to_s(double ms) { return ms * 1e-3; }
// Rounds to the nearest nanosecond; simulator inputs pass through here only.
inline Nanos s_to_ns(Seconds s) { return static_cast<Nanos>(std::llround(s * 1e9)); }
inline Seconds ns_to_s(Nanos ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace harp
