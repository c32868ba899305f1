// A simulated timeline as a schedule::Timeline, written by the one Chrome-trace writer
// (schedule/timeline.h) that the runtime uses for measured ones. A send is drawn as its
// link occupancy, a receive from its post until its data arrived; the latency after the
// link frees is not drawn on the send lane.
#include "harp/sim/trace.h"

#include <algorithm>

namespace harp::sim {
namespace {

double ns_to_us(Nanos ns) { return static_cast<double>(ns) / 1000.0; }

// The stage's fixed cost per call in a compute of `action`: a forward's, or a backward's
// (under a split backward its I carries it; W none).
double fixed_part(const schedule::Action& action, const plan::Plan& plan) {
  if (action.stage < 0 || action.stage >= plan.num_stages()) return 0;
  const plan::Stage& s = plan.stages[action.stage];
  if (action.kind == schedule::ActionKind::kF) return s.fixed_fwd_s;
  return action.is_input_backward() ? s.fixed_bwd_s : 0.0;
}

}  // namespace

schedule::Timeline timeline_of(const SimResult& result, const plan::Plan& plan) {
  schedule::Timeline t;
  const int ranks = static_cast<int>(result.ranks.size());
  for (int r = 0; r < ranks; ++r) {
    const std::string sub = r < plan.num_stages() ? plan.stages[r].subcluster_name : "";
    t.rows.push_back({r, r, schedule::row_name(r, sub, 0, 1)});
  }
  t.events.reserve(result.spans.size());
  for (const Span& sp : result.spans) {
    schedule::TimelineEvent e;
    e.rank = sp.rank;
    e.action = sp.action;
    if (sp.action.is_send()) {
      e.lane = schedule::Lane::kSend;
      e.start_us = ns_to_us(sp.link_start_ns);
      e.dur_us = ns_to_us(sp.link_end_ns - sp.link_start_ns);
      e.peer = sp.action.kind == schedule::ActionKind::kSendF ? sp.rank + 1 : sp.rank - 1;
      e.issued_us = ns_to_us(sp.start_ns);
      e.arrive_us = ns_to_us(sp.arrive_ns);
    } else if (sp.action.is_recv()) {
      e.lane = schedule::Lane::kRecv;
      e.start_us = ns_to_us(sp.start_ns);
      e.dur_us = ns_to_us(std::max<Nanos>(0, sp.arrive_ns - sp.start_ns));
      e.peer = sp.action.kind == schedule::ActionKind::kRecvF ? sp.rank - 1 : sp.rank + 1;
    } else {
      e.start_us = ns_to_us(sp.start_ns);
      e.dur_us = ns_to_us(sp.end_ns - sp.start_ns);
      if (sp.action.is_compute()) e.fixed_us = 1e6 * fixed_part(sp.action, plan);
    }
    t.events.push_back(e);
  }
  return t;
}

Json chrome_trace(const SimResult& result, const plan::Plan& plan) {
  return schedule::chrome_trace(timeline_of(result, plan));
}

}  // namespace harp::sim
