// What `harp plan` prints (see report.h).
#include "harp/planner/report.h"

#include <limits>

#include "harp/common/format.h"
#include "harp/common/table.h"
#include "harp/plan/plan_io.h"
#include "harp/sim/run.h"

namespace harp::planner {
namespace {

// Device ids, runs of consecutive ones as first-last: "0, 4-5".
std::string join_ids(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + (j == i ? std::to_string(ids[i]) : fmt("%d-%d", ids[i], ids[j]));
    i = j + 1;
  }
  return out;
}

void write_stages(const plan::Plan& p, const StageCosts& costs, std::ostream& out) {
  Table t({"stage", "subcluster", "devices", "layers", "dp x tp", "recompute", "N", "fwd", "bwd", "comm",
           "memory / usable", "costs"});
  for (int i = 0; i < p.num_stages(); ++i) {
    const auto& s = p.stages[i];
    const auto& dev = costs.cluster().device_of(s.subcluster);
    std::string devs = s.devices.size() == 1 ? std::to_string(s.devices[0])
                                             : fmt("%d-%d", s.devices.front(), s.devices.back());
    if (s.devices.size() > 1 && s.devices.back() - s.devices.front() + 1 != static_cast<int>(s.devices.size()))
      devs = join_ids(s.devices);
    std::string where = s.subcluster_name + " (" + dev.name + ")";
    std::string mesh = fmt("%d x %d", s.dp, s.tp) + (s.zero > 0 ? fmt(", ZeRO-%d", s.zero) : std::string());
    if (s.mixed()) where = s.replica_summary();
    if (!s.shares.empty()) mesh += ", shares " + s.shares_ratio();
    t.add({std::to_string(i), where, devs, fmt("[%d, %d)", s.first_layer, s.last_layer), mesh,
           recompute_name(s.recompute), std::to_string(s.launch_count), fmt_time(s.fwd_s), fmt_time(s.bwd_s),
           i + 1 < p.num_stages() ? fmt_time(s.comm_s) : "-",
           fmt("%.1f / %.1f GiB", bytes_to_gib(s.memory_bytes),
               bytes_to_gib(usable_bytes(costs, s))),
           s.cost_source});
  }
  t.print(out);
  const auto& pr = p.predicted;
  out << "\npredicted iteration: " << fmt_time(pr.iteration_s) << " = round trip "
      << fmt_time(pr.round_trip_s) << " + (B-1) x P " << fmt_time(pr.steady_s)
      << " + all-reduce and optimizer " << fmt_time(pr.end_s) << "\n";
  out << "period P: " << fmt_time(pr.period_s) << "   bubble (closed form): "
      << fmt("%.1f%%", 100 * pr.bubble_fraction) << "\n";
  if (!p.cost_source.empty()) out << "costs: " << p.cost_source << "\n";
}

void write_stats(const StrategyResult& r, std::ostream& out) {
  if (r.strategy == plan::Strategy::kUniform) return;
  out << "search: " << fmt("%.1f ms", r.stats.wall_s * 1e3) << ", " << r.stats.caps_evaluated
      << " of " << r.stats.caps_total << " candidate periods evaluated in " << r.stats.dp_runs << " DP runs, "
      << r.stats.states_visited
      << " DP states, " << r.stats.front_entries << " Pareto entries, " << r.stats.orders_tried
      << " subcluster order(s)\n";
}

// One row per strategy, for the table and the JSON alike.
struct CompareRow {
  std::string name;
  const StrategyResult* r;
  double simulated = std::numeric_limits<double>::quiet_NaN();
};

std::vector<CompareRow> compare_rows(const PlanOutcome& c) {
  std::vector<CompareRow> rows;
  for (const auto& r : c.compared) {
    CompareRow row{plan::strategy_name(r.strategy), &r};
    if (r.feasible) {
      auto run = sim::simulate_plan(r.plan, r.plan.schedule, {false});
      if (run.ok()) row.simulated = run->result.iteration_s();
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

void write_plan_report(const PlanOutcome& c, std::ostream& out) {
  const StrategyResult& r = c.result;
  const plan::Plan& p = r.plan;
  out << "plan (" << plan::strategy_name(r.strategy) << ", schedule " << plan::schedule_kind_name(p.schedule)
      << ") for " << p.model_name << (c.label.empty() ? "" : ", " + c.label) << ", B = " << p.microbatches
      << " microbatches of " << p.microbatch_size << "\n\n";
  write_stages(p, c.problem.costs, out);
  write_stats(r, out);
  if (!r.schedules.empty())
    out << "schedule " << plan::schedule_kind_name(p.schedule) << ": the fastest pair that fits of "
        << r.plans_weighed << " searched plan" << (r.plans_weighed == 1 ? "" : "s")
        << " under each schedule, simulated; this plan's: " << describe_options(r.schedules) << "\n";
}

Json plan_report_json(const PlanOutcome& c) {
  const StrategyResult& r = c.result;
  Json j = plan::plan_to_json(r.plan);
  j["search"]["caps_total"] = r.stats.caps_total;
  j["search"]["caps_evaluated"] = r.stats.caps_evaluated;
  j["search"]["dp_runs"] = r.stats.dp_runs;
  j["search"]["dp_states"] = r.stats.states_visited;
  if (!r.schedules.empty()) {
    Json options = Json::array();
    for (const ScheduleOption& o : r.schedules)
      options.push_back({{"schedule", plan::schedule_kind_name(o.kind)}, {"fits", o.fits},
                         {"simulated_s", o.simulated_s}, {"peak_bytes", o.peak_bytes}, {"why", o.why}});
    j["schedule_options"] = options;
    j["search"]["plans_weighed"] = r.plans_weighed;
  }
  return j;
}

void write_compare_report(const PlanOutcome& c, std::ostream& out) {
  Table t({"strategy", "stages", "schedule", "predicted", "simulated", "x lower bound", "harp speedup"});
  double harp_sim = 0;
  for (const CompareRow& row : compare_rows(c)) {
    const StrategyResult& r = *row.r;
    if (!r.feasible) {
      t.add({row.name, "-", "-", "infeasible", "-", "-", "-"});
      continue;
    }
    if (r.strategy == plan::Strategy::kHarp) harp_sim = row.simulated;
    t.add({row.name, std::to_string(r.plan.num_stages()), plan::schedule_kind_name(r.plan.schedule),
           fmt_time(r.plan.predicted.iteration_s), fmt_time(row.simulated),
           fmt("%.2f", row.simulated / c.problem.lower_bound_s),
           harp_sim > 0 ? fmt("%.2fx", row.simulated / harp_sim) : "-"});
  }
  out << "\n";
  t.print(out);
  out << "\nlower bound: " << fmt_time(c.problem.lower_bound_s) << " (" << c.problem.lower_bound_rule
      << "); homogeneous plans as if every device were a " << c.problem.slowest_device
      << "; harp speedup = the strategy's simulated time / harp's\n";
  for (const auto& r : c.compared)
    if (!r.feasible) out << plan::strategy_name(r.strategy) << " is infeasible: " << r.reason << "\n";
}

Json compare_report_json(const PlanOutcome& c) {
  Json j = Json::array();
  for (const CompareRow& row : compare_rows(c)) {
    const StrategyResult& r = *row.r;
    if (!r.feasible) {
      j.push_back({{"strategy", row.name}, {"feasible", false}, {"reason", r.reason}});
      continue;
    }
    j.push_back({{"strategy", row.name},
                 {"feasible", true},
                 {"stages", r.plan.num_stages()},
                 {"predicted_s", r.plan.predicted.iteration_s},
                 {"simulated_s", row.simulated},
                 {"lower_bound_ratio", row.simulated / c.problem.lower_bound_s}});
  }
  return Json{{"lower_bound_s", c.problem.lower_bound_s},
              {"lower_bound_rule", c.problem.lower_bound_rule},
              {"strategies", j}};
}

}  // namespace harp::planner
