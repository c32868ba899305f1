// Chrome/Perfetto trace JSON of a simulated timeline (the runtime writes the same
// format for measured ones). A send is drawn as its link occupancy, a receive from its
// post until its data arrived; the latency after the link frees is not drawn on tid 1.
#include "harp/sim/trace.h"

#include <algorithm>

namespace harp::sim {
namespace {

constexpr int kComputeTid = 0, kSendTid = 1, kRecvTid = 2;

double ns_to_us(Nanos ns) { return static_cast<double>(ns) / 1000.0; }

std::string process_name(const plan::Plan& plan, int rank) {
  std::string name = "stage " + std::to_string(rank);
  if (rank < plan.num_stages() && !plan.stages[rank].subcluster_name.empty())
    name += " (" + plan.stages[rank].subcluster_name + ")";
  return name;
}

Json metadata(const char* what, int pid, int tid, Json args) {
  return Json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

struct Timed {
  Nanos ts_ns, dur_ns;
  int pid, tid;
  const Span* span;
};

}  // namespace

Json chrome_trace(const SimResult& result, const plan::Plan& plan) {
  Json events = Json::array();
  const int ranks = static_cast<int>(result.ranks.size());
  for (int r = 0; r < ranks; ++r) {
    events.push_back(metadata("process_name", r, 0, {{"name", process_name(plan, r)}}));
    events.push_back(metadata("process_sort_index", r, 0, {{"sort_index", r}}));
    events.push_back(metadata("thread_name", r, kComputeTid, {{"name", "compute"}}));
    events.push_back(metadata("thread_name", r, kSendTid, {{"name", "send"}}));
    events.push_back(metadata("thread_name", r, kRecvTid, {{"name", "recv"}}));
  }

  // Sorted by start so viewers and diff tools see one stable order; ties keep the
  // simulator's (deterministic) order.
  std::vector<Timed> timed;
  timed.reserve(result.spans.size());
  for (const Span& sp : result.spans) {
    if (sp.action.is_send())
      timed.push_back(
          {sp.link_start_ns, sp.link_end_ns - sp.link_start_ns, sp.rank, kSendTid, &sp});
    else if (sp.action.is_recv())
      timed.push_back({sp.start_ns, std::max<Nanos>(0, sp.arrive_ns - sp.start_ns), sp.rank,
                       kRecvTid, &sp});
    else
      timed.push_back({sp.start_ns, sp.end_ns - sp.start_ns, sp.rank, kComputeTid, &sp});
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const Timed& a, const Timed& b) { return a.ts_ns < b.ts_ns; });

  for (const Timed& t : timed) {
    const schedule::Action& a = t.span->action;
    Json args = Json::object();
    if (a.microbatch >= 0) args["microbatch"] = a.microbatch;
    const char* cat = "compute";
    if (a.is_send()) {
      cat = "send";
      args["to_rank"] = a.kind == schedule::ActionKind::kSendF ? t.pid + 1 : t.pid - 1;
      args["issued_us"] = ns_to_us(t.span->start_ns);
      args["arrive_us"] = ns_to_us(t.span->arrive_ns);
    } else if (a.is_recv()) {
      cat = "recv";
      args["from_rank"] = a.kind == schedule::ActionKind::kRecvF ? t.pid - 1 : t.pid + 1;
    }
    events.push_back(Json{{"name", schedule::short_name(a)},
                          {"cat", cat},
                          {"ph", "X"},
                          {"pid", t.pid},
                          {"tid", t.tid},
                          {"ts", ns_to_us(t.ts_ns)},
                          {"dur", ns_to_us(t.dur_ns)},
                          {"args", std::move(args)}});
  }
  return Json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace harp::sim
