// Re-planning on drift (see replan.h): the measured factors, a plan over them, and
// whether it pays for its restart.
#include "replan.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "harp/common/format.h"
#include "harp/plan/closed_form.h"
#include "harp/plan/plan_io.h"

namespace harp::launch {
namespace {

constexpr const char* kWho = kElasticWho;

double factor_of(const ComputeDrift& drift, const std::string& subcluster) {
  auto it = drift.find(subcluster);
  return it == drift.end() ? 1.0 : it->second;
}

// The key of the link between subclusters a and b.
std::pair<std::string, std::string> link_key(const std::string& a, const std::string& b) {
  return a < b ? std::pair{a, b} : std::pair{b, a};
}

double factor_of(const LinkDrift& drift, const std::string& a, const std::string& b) {
  auto it = drift.find(link_key(a, b));
  return it == drift.end() ? 1.0 : it->second;
}

std::string describe_links(const LinkDrift& drift) {
  std::string out;
  for (const auto& [pair, f] : drift) out += (out.empty() ? "" : ", ") + pair.first + "-" + pair.second + " x" + fmt("%.2f", f);
  return out.empty() ? "none" : out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// `p` with every stage's forward + backward per microbatch set to `compute_s` (the split
// between the two kept) and, where `link_s` gives one (> 0), its transfer to the next
// stage set to it.
plan::Plan with_measured(plan::Plan p, const std::vector<double>& compute_s, const std::vector<double>& link_s) {
  for (int s = 0; s < p.num_stages(); ++s) {
    plan::Stage& st = p.stages[s];
    const double f = st.compute_s() > 0 ? compute_s[s] / st.compute_s() : 1.0;
    st.fwd_s *= f;
    st.bwd_s *= f;
    if (s + 1 < p.num_stages() && s < static_cast<int>(link_s.size()) && link_s[s] > 0)
      st.comm_s = std::max(link_s[s], st.comm_latency_s);
  }
  return p;
}

// Two plans that run the same ranks the same way: nothing to restart for.
bool same_layout(const plan::Plan& a, const plan::Plan& b) {
  if (a.microbatches != b.microbatches || a.num_stages() != b.num_stages() || a.schedule != b.schedule) return false;
  for (int s = 0; s < a.num_stages(); ++s) {
    const plan::Stage &x = a.stages[s], &y = b.stages[s];
    if (x.first_layer != y.first_layer || x.last_layer != y.last_layer || x.devices != y.devices || x.dp != y.dp ||
        x.tp != y.tp || x.recompute != y.recompute || x.launch_count != y.launch_count)
      return false;
  }
  return true;
}

}  // namespace

cluster::Cluster drifted_cluster(const cluster::Cluster& c, const LinkDrift& drift) {
  cluster::Cluster out = c;
  auto index = [&](const std::string& name) {
    for (size_t i = 0; i < c.subclusters.size(); ++i)
      if (c.subclusters[i].name == name) return static_cast<int>(i);
    return -1;
  };
  for (const auto& [pair, f] : drift) {
    const int a = index(pair.first), b = index(pair.second);
    if (a < 0 || b < 0 || a == b || !(f > 0)) continue;  // a subcluster since lost
    bool declared = false;
    for (cluster::SubclusterLink& l : out.links)
      if (link_key(l.a, l.b) == pair) {
        l.link.bandwidth_gbps /= f;
        declared = true;
      }
    if (!declared) {
      cluster::Link l = c.path_link(a, b);
      l.bandwidth_gbps /= f;
      out.links.push_back({pair.first, pair.second, l});
    }
  }
  return out;
}

namespace {

std::string describe_drift(const ComputeDrift& drift) {
  std::string out;
  for (const auto& [name, f] : drift) out += (out.empty() ? "" : ", ") + name + " x" + fmt("%.2f", f);
  return out.empty() ? "none" : out;
}

}  // namespace

void append_recovery(const std::string& elastic_dir, int node_rank, const Json& record) {
  if (node_rank == 0) std::ofstream(elastic_dir + "/recoveries.jsonl", std::ios::app) << record.dump() << "\n";
}

Replanner::Replanner(const ElasticOptions& o, const PlanFn& plan, Clock& clock, std::ostream& err,
                     std::string out_dir)
    : o_(o), plan_(plan), clock_(clock), err_(err), out_dir_(std::move(out_dir)), elastic_dir_(out_dir_ + "/elastic") {}

StatusOr<PlanAttempt> Replanner::plan_over(const cluster::Cluster& cluster) const {
  return plan_(drifted_cluster(cluster, link_drift_), drift_);
}

std::optional<PlanAttempt> Replanner::take_next_plan() {
  std::optional<PlanAttempt> next = std::move(next_plan_);
  next_plan_.reset();
  return next;
}

void Replanner::start(const plan::Plan& plan, const cluster::Cluster& cluster) {
  current_ = plan;
  cluster_ = cluster;
  current_drift_ = drift_;
  current_link_drift_ = link_drift_;
  adopting_ = false;
  drifts_seen_ = 0;
  probes_seen_ = 0;
  quiet_probe_step_ = -1;
}

Json Replanner::take_adopted_record() {
  Json record = std::move(adopted_);
  adopted_ = Json();
  return record;
}

void Replanner::append_record(const Json& record) { append_recovery(elastic_dir_, o_.node_rank, record); }

// While a launch runs (LaunchOptions::stop_when): the drifts rank 0 recorded since it
// started, each judged once; true stops the workers at their next checkpoint.
bool Replanner::watch_drifts(int attempt, double launched_unix) {
  if (clock_.now_s() < next_poll_s_) return false;
  next_poll_s_ = clock_.now_s() + o_.poll_s;
  const RunProgress p = read_progress(out_dir_, launched_unix);
  while (drifts_seen_ < static_cast<int>(p.drifts.size()))
    if (judge_drift(attempt, p.drifts[static_cast<size_t>(drifts_seen_++)], p, launched_unix)) return adopting_ = true;
  while (probes_seen_ < static_cast<int>(p.probes.size()))
    if (judge_probe(attempt, p.probes[static_cast<size_t>(probes_seen_++)], p, launched_unix)) return adopting_ = true;
  return false;
}

// A drift: the measured factors, a plan over them, and whether it pays for the restart.
bool Replanner::judge_drift(int attempt, const DriftRecord& d, const RunProgress& p, double launched_unix) {
  // The costs as the run measures them now: each subcluster's factor is its stages'
  // measured compute over what the planner's costs (without any factor) give them, the
  // median when it runs several. It holds the drift and the cost model's own error on
  // this machine (a profile 15% off, the run's contention) alike.
  const int S = current_.num_stages();
  const bool levels = static_cast<int>(d.stage_measured_s.size()) == S && static_cast<int>(d.stage_baseline_s.size()) == S;
  std::vector<double> measured(S), baseline(S);
  std::map<std::string, std::vector<double>> factors;
  for (int s = 0; s < S; ++s) {
    const plan::Stage& st = current_.stages[s];
    const double ratio = s < static_cast<int>(d.stage_ratios.size()) ? d.stage_ratios[s] : s == d.stage ? d.ratio : 1.0;
    measured[s] = levels ? d.stage_measured_s[s] : st.compute_s() * ratio;
    baseline[s] = levels ? d.stage_baseline_s[s] : st.compute_s();
    const double plain = st.compute_s() / factor_of(current_drift_, st.subcluster_name);
    if (plain > 0 && measured[s] > 0) factors[st.subcluster_name].push_back(measured[s] / plain);
  }
  for (auto& [name, v] : factors) drift_[name] = median(v);
  // The links between subclusters likewise: each one's measured transit per message over
  // the planner's (without any factor), on its bandwidth term (the latency stays).
  const bool link_levels = static_cast<int>(d.link_measured_s.size()) == S - 1 &&
                           static_cast<int>(d.link_baseline_s.size()) == S - 1;
  std::vector<double> link_measured(static_cast<size_t>(std::max(0, S - 1)), 0.0), link_baseline = link_measured;
  std::map<std::pair<std::string, std::string>, std::vector<double>> link_factors;
  for (int s = 0; link_levels && s + 1 < S; ++s) {
    link_measured[s] = d.link_measured_s[s];
    link_baseline[s] = d.link_baseline_s[s];
    const plan::Stage &st = current_.stages[s], &next = current_.stages[s + 1];
    if (st.subcluster_name.empty() || st.subcluster_name == next.subcluster_name) continue;  // a pool's own link
    const double plain = (st.comm_s - st.comm_latency_s) /
                         factor_of(current_link_drift_, st.subcluster_name, next.subcluster_name);
    const double got = link_measured[s] - st.comm_latency_s;
    if (plain > 0 && got > 0)
      link_factors[link_key(st.subcluster_name, next.subcluster_name)].push_back(got / plain);
  }
  for (auto& [pair, v] : link_factors) link_drift_[pair] = median(v);
  Json record = {{"attempt", attempt},
                 {"drift_after_steps", d.after_steps},
                 {"stage", d.stage},
                 {"link", d.link},
                 {"ratio", d.ratio},
                 {"compute_drift", drift_},
                 {"link_drift", links_json()},
                 {"old_plan", elastic_dir_ + "/plan_" + std::to_string(attempt) + ".json"}};
  err_ << kWho << "drift after step " << d.after_steps << ": "
       << (d.link >= 0 ? "the link after stage " + std::to_string(d.link) : "stage " + std::to_string(d.stage))
       << " at " << fmt("%.2fx", d.ratio) << "; the subclusters compute " << describe_drift(drift_)
       << " x the planner's costs" << (link_drift_.empty() ? "" : " and the links take " + describe_links(link_drift_))
       << ", as measured now\n";
  // Predictions are the closed form on those costs plus what the closed form leaves out of
  // this run's steps: the running plan's measured step before the drift less its closed
  // form with the stage times then measured (the metrics reduction, the machine's other
  // per-step costs; without steps before the drift, the same now). The drifted plan is
  // not predicted but measured: the closed form adds the round trip and the end to B - 1
  // periods, and with one stage bound by its compute they overlap (it read 1.73 s for a
  // step measured at 1.58 s).
  const double old_pred = plan::closed_form(with_measured(current_, measured, link_measured)).iteration_s;
  const int w = std::max(1, o_.drift_window);
  // The drifted step: the median of the window's newer half (the detector's level).
  double measured_old = median_step_s(p, d.after_steps - (w + 1) / 2, d.after_steps);
  if (measured_old <= 0) measured_old = old_pred;
  int first_step = d.after_steps;
  for (const auto& [step, seconds] : p.step_s) first_step = std::min(first_step, step);
  const double before = median_step_s(p, first_step + 1, d.after_steps - w);  // after the warm-up step
  const double model_error = before > 0 ? before - plan::closed_form(with_measured(current_, baseline, link_baseline)).iteration_s
                                        : measured_old - old_pred;
  return replan_and_decide(attempt, std::move(record), p, launched_unix, old_pred, measured_old, before, model_error);
}

// A link probe (a link no two consecutive stages of the running plan join): when it has
// moved past the drift threshold from what the costs say of it, the link's factor becomes
// what it measured and the run is re-planned as for a drift. The running plan's
// prediction is its own closed form, and what the closed form leaves out is read from
// its steps up to the last probe that agreed with the costs: the plan may still use the
// link (the tied embedding's gradient between its first and last stage crosses it), and
// its steps since the change would credit the change to the model.
bool Replanner::judge_probe(int attempt, const ProbeRecord& q, const RunProgress& p, double launched_unix) {
  const int a = subcluster_index(q.a), b = subcluster_index(q.b);
  if (a < 0 || b < 0 || a == b) return false;
  const cluster::Link model = cluster_.path_link(a, b);
  const double plain = model.transfer_s(q.bytes) - model.latency_s, got = q.transit_s - model.latency_s;
  if (!(plain > 0 && got > 0)) return false;
  const double factor = got / plain, now = factor_of(link_drift_, q.a, q.b);
  const double threshold = o_.drift_threshold > 1 ? o_.drift_threshold : 1.5;
  if (factor < now * threshold && factor > now / threshold) {
    quiet_probe_step_ = std::max(quiet_probe_step_, q.after_steps);
    return false;
  }
  link_drift_[link_key(q.a, q.b)] = factor;
  Json record = {{"attempt", attempt},
                 {"probe_after_steps", q.after_steps},
                 {"link_probe", q.a + "-" + q.b},
                 {"ratio", factor / now},
                 {"compute_drift", drift_},
                 {"link_drift", links_json()},
                 {"old_plan", elastic_dir_ + "/plan_" + std::to_string(attempt) + ".json"}};
  err_ << kWho << "the link " << q.a << "-" << q.b << ", which the running plan does not cross, takes "
       << fmt("x%.2f", factor) << " the link model (probed after step " << q.after_steps << ": "
       << fmt_time(q.transit_s) << " for " << fmt("%.0f", q.bytes) << " bytes; the costs said x"
       << fmt("%.2f", now) << ")\n";
  const int w = std::max(1, o_.drift_window);
  const double old_pred = plan::closed_form(current_).iteration_s;
  double measured_old = median_step_s(p, p.steps_done - w, p.steps_done);
  if (measured_old <= 0) measured_old = old_pred;
  int first_step = p.steps_done;
  for (const auto& [step, seconds] : p.step_s) first_step = std::min(first_step, step);
  const double before = median_step_s(p, first_step + 1, quiet_probe_step_);  // after the warm-up step
  return replan_and_decide(attempt, std::move(record), p, launched_unix, old_pred, measured_old, before,
                           (before > 0 ? before : measured_old) - old_pred);
}

int Replanner::subcluster_index(const std::string& name) const {
  for (size_t i = 0; i < cluster_.subclusters.size(); ++i)
    if (cluster_.subclusters[i].name == name) return static_cast<int>(i);
  return -1;
}

Json Replanner::links_json() const {
  Json links = Json::object();
  for (const auto& [pair, f] : link_drift_) links[pair.first + "-" + pair.second] = f;
  return links;
}

// Plans over the calibrated costs and decides whether the plan pays for its restart:
// `record` so far; the running plan's closed form on the costs measured now, its measured
// step now, its measured step before the drift (or -1) and what the closed form leaves
// out of this run's steps. True when adopted (the workers stop at the next checkpoint).
bool Replanner::replan_and_decide(int attempt, Json record, const RunProgress& p, double launched_unix, double old_pred,
                                   double measured_old, double before, double model_error) {
  const double plan_start = clock_.now_s();
  auto outcome = plan_(drifted_cluster(cluster_, link_drift_), drift_);
  replan_s_ = clock_.now_s() - plan_start;
  if (!outcome.ok() || !outcome->feasible) {
    const std::string why = !outcome.ok() ? outcome.status().message() : outcome->reason;
    err_ << kWho << "no plan for the drifted costs (" << why << "); keeping the running one\n";
    record["adopted"] = false;
    record["reason"] = why;
    append_record(record);
    return false;
  }
  const double new_pred = plan::closed_form(outcome->plan).iteration_s;
  const double estimated_new = std::max(new_pred + model_error, 0.5 * new_pred);
  const int every = o_.checkpoint_every;
  const int stop_at = every > 0 ? (p.steps_done + every) / every * every : p.steps_done + 1;
  const int left = o_.steps - stop_at;
  const double restart_s = p.first_step_unix >= 0 ? p.first_step_unix - launched_unix : 0.0;
  const double gain = left > 0 ? 1 - (left * estimated_new + restart_s) / (left * measured_old) : 0.0;
  const bool same = same_layout(current_, outcome->plan);
  // A plan the model predicts no faster on the same costs is never worth a restart, even
  // when a burst of load makes the running plan's measured step look slow.
  const bool faster = new_pred < old_pred;
  const bool adopt = !same && left > 0 && faster && gain >= o_.replan_min_gain;
  const std::string candidate = elastic_dir_ + "/candidate_" + std::to_string(candidates_++) + ".json";
  if (Status s = plan::save_plan(outcome->plan, candidate); !s.ok()) {
    err_ << kWho << s.message() << "; keeping the running plan\n";
    return false;
  }
  record.update({{"new_plan", candidate},
                 {"replan_s", replan_s_},
                 {"predicted_old_s", old_pred},
                 {"predicted_new_s", new_pred},
                 {"measured_old_s", measured_old},
                 {"measured_before_s", before > 0 ? Json(before) : Json()},
                 {"model_error_s", model_error},
                 {"estimated_new_s", estimated_new},
                 {"restart_s", restart_s},
                 {"steps_left", left},
                 {"predicted_gain", gain},
                 {"adopted", adopt}});
  err_ << kWho << "re-planned on the drifted costs in " << fmt("%.1f ms", replan_s_ * 1e3) << ": "
       << (same ? "the same plan" : candidate) << ", " << fmt_time(estimated_new) << " per step against "
       << fmt_time(measured_old) << " measured now (predicted " << fmt_time(new_pred)
       << (model_error < 0 ? " - " : " + ") << fmt_time(std::abs(model_error))
       << " the closed form leaves out of this run's steps; the running plan " << fmt_time(old_pred)
       << " on these costs"
       << "); over the " << left << " steps left after step " << stop_at
       << ", counting a restart of " << fmt("%.1f s", restart_s) << ": " << fmt("%+.1f%%", 100 * gain)
       << (adopt    ? "; adopting it at the checkpoint of step " + std::to_string(stop_at)
           : !faster ? std::string("; keeping the running plan (the new one is predicted no faster on these costs)")
                     : "; keeping the running plan (--replan-min-gain " + fmt("%.2f", o_.replan_min_gain) + ")")
       << "\n";
  if (!adopt) {
    append_record(record);
    return false;
  }
  adopted_ = record;  // pending_ once the stop is seen (the last restart's may still be)
  adopted_["attempt"] = attempt + 1;
  adopted_["devices_left"] = cluster_.num_devices();
  next_plan_ = *outcome;
  return true;
}

}  // namespace harp::launch
