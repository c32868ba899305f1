// The link probe (`harp testbed probe`): messages of a range of sizes sent over each
// link of an emulated cluster that is up, in four traffic patterns, each timed against
// the link model (latency + bytes / bandwidth, cluster::Link::transfer_s) that the
// planner and the simulator use. It answers "does this testbed do what the cluster file
// says?" for the message sizes and patterns a pipelined run produces.
//
// Each host's side runs on a thread that entered the host's network namespace
// (setns), so one process probes every link; one TCP connection per pair of hosts with
// TCP_NODELAY, full duplex, as a Gloo pair is. Timestamps come from one steady clock.
// Not measured: Gloo's own framing (a few dozen bytes per message) and its threads;
// `harp trace compare` on a training run measures those.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "harp/common/status.h"
#include "harp/testbed/testbed.h"

namespace harp::testbed {

enum class Pattern {
  kOneWaySpaced,   // a -> b, one message at a time, the link idle in between
  kOneWayBurst,    // a -> b, messages back to back: the time between arrivals
  kBothSpaced,     // a -> b and b -> a at the same instants
  kBothBurst,      // both directions back to back at once
};
const char* pattern_name(Pattern p);
const std::vector<Pattern>& all_patterns();

struct ProbeOptions {
  std::vector<std::int64_t> sizes = {1 << 10, 4 << 10, 16 << 10, 32 << 10, 64 << 10,
                                     256 << 10, 1 << 20, 4 << 20};
  std::vector<Pattern> patterns = all_patterns();
  int repeats = 5;             // timed messages per (link, size, pattern, direction)
  double max_message_s = 0.5;  // sizes whose model time exceeds this are skipped
  std::vector<int> wires;      // indices into Topology::wires; empty: every wire
  std::chrono::milliseconds timeout{60000};  // per (link, size, pattern)
  // Asked before each (link, size): true ends the probe with a cancelled status (harp
  // testbed probe on SIGINT or SIGTERM, which then takes the testbed down).
  std::function<bool()> stop;
};

// One measured cell. Spaced patterns: the median of (last byte received − send began);
// burst patterns: the median time between two arrivals (the link's throughput).
struct ProbeRow {
  int wire = 0;
  int from = 0, to = 0;  // host indices: the direction timed
  Pattern pattern = Pattern::kOneWaySpaced;
  std::int64_t bytes = 0;
  double model_s = 0, measured_s = 0;
  int samples = 0;
  double error() const { return model_s > 0 ? (measured_s - model_s) / model_s : 0; }
};

// Probes the wires of `topology` (which must be up). `progress`, if set, is called with
// one line per finished (wire, size). IoError naming the host, size and pattern when a
// socket fails or a message does not arrive within options.timeout.
StatusOr<std::vector<ProbeRow>> probe_links(const Topology& topology, const ProbeOptions& options,
                                            const std::function<void(const std::string&)>& progress = {});

// The rows as CSV (header first), and as an SVG chart a person can read: per wire,
// measured / model against message size (log scale), one line per pattern and
// direction, the ±10% band shaded.
// The rows as `harp testbed probe` prints them: a table, the model, and the worst error
// of the messages of 16 KiB or more.
void write_probe_report(const Topology& topology, const std::vector<ProbeRow>& rows, std::ostream& out);
// A message size as the command line gives it: 512, 16K (KiB), 4M (MiB), 1 B to 256 MiB.
StatusOr<std::int64_t> parse_message_size(const std::string& text);
std::string probe_csv(const Topology& topology, const std::vector<ProbeRow>& rows);
std::string probe_svg(const Topology& topology, const std::vector<ProbeRow>& rows);

}  // namespace harp::testbed
