// The shared timeline: Chrome-trace writing and reading, per-stage figures, comparison.
#include "harp/schedule/timeline.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "harp/common/quantities.h"

namespace harp::schedule {
namespace {

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::kCompute: return "compute";
    case Lane::kSend: return "send";
    case Lane::kRecv: return "recv";
  }
  return "?";
}

Json metadata(const char* what, int pid, int tid, Json args) {
  return Json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

double relative_error(double predicted, double measured) {
  return predicted > 0 ? (measured - predicted) / predicted : (measured > 0 ? INFINITY : 0.0);
}

}  // namespace

std::string row_name(int stage, const std::string& subcluster, int replica, int replicas) {
  std::string name = "stage " + std::to_string(stage);
  if (!subcluster.empty()) name += " (" + subcluster + ")";
  if (replicas > 1) name += " replica " + std::to_string(replica);
  return name;
}

Json chrome_trace(const Timeline& timeline) {
  Json events = Json::array();
  for (const TimelineRow& row : timeline.rows) {
    events.push_back(metadata("process_name", row.rank, 0, {{"name", row.name}}));
    events.push_back(metadata("process_sort_index", row.rank, 0, {{"sort_index", row.rank}}));
    for (Lane lane : {Lane::kCompute, Lane::kSend, Lane::kRecv})
      events.push_back(metadata("thread_name", row.rank, static_cast<int>(lane), {{"name", lane_name(lane)}}));
  }
  std::vector<const TimelineEvent*> order;
  order.reserve(timeline.events.size());
  for (const auto& e : timeline.events) order.push_back(&e);
  // Sorted by start so viewers and diff tools see one stable order.
  std::stable_sort(order.begin(), order.end(),
                   [](const TimelineEvent* a, const TimelineEvent* b) { return a->start_us < b->start_us; });
  for (const TimelineEvent* e : order) {
    Json args = {{"step", e->step}, {"stage", e->action.stage}};
    if (e->action.microbatch >= 0) args["microbatch"] = e->action.microbatch;
    if (e->peer >= 0) args[e->lane == Lane::kSend ? "to_rank" : "from_rank"] = e->peer;
    if (e->issued_us >= 0) args["issued_us"] = e->issued_us;
    if (e->arrive_us >= 0) args["arrive_us"] = e->arrive_us;
    if (std::isfinite(e->fixed_us)) args["fixed_us"] = e->fixed_us;
    events.push_back(Json{{"name", short_name(e->action)},
                          {"cat", lane_name(e->lane)},
                          {"ph", "X"},
                          {"pid", e->rank},
                          {"tid", static_cast<int>(e->lane)},
                          {"ts", e->start_us},
                          {"dur", e->dur_us},
                          {"args", std::move(args)}});
  }
  return Json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

namespace {

StatusOr<Timeline> read_timeline(const Json& trace, const std::string& file);

}  // namespace

StatusOr<Timeline> timeline_from_trace(const Json& trace, const std::string& file) {
  try {
    return read_timeline(trace, file);
  } catch (const Json::exception& e) {  // a field of the wrong type
    return invalid_argument(file + ": not a trace HARP wrote (" + std::string(e.what()) +
                            "); give a trace written by harp simulate --trace or harp train --trace-steps");
  }
}

namespace {

StatusOr<Timeline> read_timeline(const Json& trace, const std::string& file) {
  const Json* events = trace.is_object() && trace.contains("traceEvents") ? &trace["traceEvents"] : nullptr;
  if (events == nullptr || !events->is_array())
    return invalid_argument(file + ": not a Chrome trace (no traceEvents list); give a trace written by "
                            "harp simulate --trace or harp train --trace-steps");
  Timeline t;
  std::map<int, TimelineRow> rows;
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& e = (*events)[i];
    auto bad = [&](const std::string& why) {
      return invalid_argument(file + ": traceEvents[" + std::to_string(i) + "]: " + why +
                              "; give a trace written by harp simulate --trace or harp train --trace-steps");
    };
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string() || !e.contains("pid") ||
        !e["pid"].is_number_integer())
      return bad("not an event with ph and an integer pid");
    const std::string ph = e["ph"];
    const int pid = e["pid"];
    if (ph == "M") {
      if (e.value("name", "") == "process_name" && e.contains("args") && e["args"].is_object()) {
        rows[pid].rank = pid;
        rows[pid].name = e["args"].value("name", "");
      }
      continue;
    }
    if (ph != "X") continue;
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number() ||
        !e.contains("name") || !e["name"].is_string() || !e.contains("args") || !e["args"].is_object())
      return bad("a complete event needs name, ts, dur and args");
    TimelineEvent ev;
    ev.rank = pid;
    ev.start_us = e["ts"];
    ev.dur_us = e["dur"];
    if (!in_range(quantity::kTraceMicros, ev.start_us) || !in_range(quantity::kTraceMicros, ev.dur_us))
      return bad("ts " + number_text(ev.start_us) + " and dur " + number_text(ev.dur_us) + " must each be " +
                 range_text(quantity::kTraceMicros) + " (a time from the trace's start, a duration)");
    const Json& args = e["args"];
    ev.step = args.value("step", 0);
    const int stage = args.value("stage", pid);
    const std::string name = e["name"];
    const std::string cat = e.value("cat", "compute");
    ev.lane = cat == "send" ? Lane::kSend : cat == "recv" ? Lane::kRecv : Lane::kCompute;
    auto parsed = parse_action(std::to_string(stage) + name);
    if (!parsed.ok()) return bad("`" + name + "` is not an action name such as F3, B3, SEND_F3 or STEP");
    ev.action = *parsed;
    ev.peer = args.value(ev.lane == Lane::kSend ? "to_rank" : "from_rank", -1);
    ev.issued_us = args.value("issued_us", -1.0);
    ev.arrive_us = args.value("arrive_us", -1.0);
    if (args.contains("fixed_us") && args["fixed_us"].is_number()) ev.fixed_us = args["fixed_us"];
    rows[pid].rank = pid;
    rows[pid].stage = stage;
    t.events.push_back(ev);
  }
  for (auto& [pid, row] : rows) t.rows.push_back(row);
  return t;
}

}  // namespace

TimelineFigures timeline_figures(const Timeline& timeline) {
  TimelineFigures out;
  // The row that represents each stage: its first rank (replica 0).
  std::map<int, int> stage_rank;
  for (const auto& row : timeline.rows)
    if (!stage_rank.count(row.stage) || row.rank < stage_rank[row.stage]) stage_rank[row.stage] = row.rank;
  std::map<int, std::pair<double, double>> step_span;  // step -> (first start, last end)
  for (const auto& e : timeline.events) {
    auto [it, fresh] = step_span.emplace(e.step, std::make_pair(e.start_us, e.start_us + e.dur_us));
    if (!fresh) {
      it->second.first = std::min(it->second.first, e.start_us);
      it->second.second = std::max(it->second.second, e.start_us + e.dur_us);
    }
  }
  out.steps = static_cast<int>(step_span.size());
  if (out.steps == 0) return out;
  double total_us = 0;
  for (const auto& [step, span] : step_span) total_us += span.second - span.first;
  out.iteration_s = total_us / out.steps * 1e-6;
  for (const auto& [stage, rank] : stage_rank) {
    StageFigures f;
    for (const auto& row : timeline.rows)
      if (row.rank == rank) f.name = row.name;
    // Compute-lane events of this rank in order, per step.
    std::map<int, std::vector<const TimelineEvent*>> by_step;
    for (const auto& e : timeline.events)
      if (e.rank == rank && e.lane == Lane::kCompute) by_step[e.step].push_back(&e);
    for (auto& [step, evs] : by_step) {
      std::stable_sort(evs.begin(), evs.end(),
                       [](const TimelineEvent* a, const TimelineEvent* b) { return a->start_us < b->start_us; });
      double prev_end = step_span[step].first;
      for (const TimelineEvent* e : evs) {
        const double d = e->dur_us * 1e-6;
        if (e->action.is_compute()) {
          f.compute_s += d;
          if (std::isfinite(e->fixed_us)) f.fixed_s = (std::isfinite(f.fixed_s) ? f.fixed_s : 0.0) + e->fixed_us * 1e-6;
          f.wait_s += std::max(0.0, e->start_us - prev_end) * 1e-6;
        } else {
          f.end_s += d;
        }
        prev_end = std::max(prev_end, e->start_us + e->dur_us);
      }
    }
    f.compute_s /= out.steps;
    f.fixed_s /= out.steps;  // NaN stays NaN
    f.end_s /= out.steps;
    f.wait_s /= out.steps;
    f.idle_s = std::max(0.0, out.iteration_s - f.compute_s - f.end_s);
    out.stages.push_back(f);
  }
  return out;
}

StatusOr<Json> compare_timelines(const TimelineFigures& predicted, const TimelineFigures& measured) {
  if (predicted.stages.size() != measured.stages.size())
    return invalid_argument("the predicted trace has " + std::to_string(predicted.stages.size()) +
                            " stages and the measured one " + std::to_string(measured.stages.size()) +
                            "; compare the traces of one plan");
  auto figure = [](double p, double m) {
    return Json{{"predicted_s", p}, {"measured_s", m}, {"error", relative_error(p, m)}};
  };
  Json stages = Json::array();
  for (size_t i = 0; i < predicted.stages.size(); ++i) {
    const auto& p = predicted.stages[i];
    const auto& m = measured.stages[i];
    stages.push_back({{"stage", static_cast<int>(i)},
                      {"name", m.name.empty() ? p.name : m.name},
                      {"compute", figure(p.compute_s, m.compute_s)},
                      {"fixed", Json{{"predicted_s", std::isfinite(p.fixed_s) ? Json(p.fixed_s) : Json(nullptr)}}},
                      {"end", figure(p.end_s, m.end_s)},
                      {"wait", figure(p.wait_s, m.wait_s)},
                      {"idle", figure(p.idle_s, m.idle_s)}});
  }
  return Json{{"iteration", figure(predicted.iteration_s, measured.iteration_s)},
              {"measured_steps", measured.steps},
              {"stages", stages}};
}

}  // namespace harp::schedule
