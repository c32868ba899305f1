// The elastic controller (see elastic.h): one attempt per plan, a recovery between them.
#include "harp/launch/elastic.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "harp/common/document.h"
#include "harp/common/exit_code.h"
#include "harp/common/format.h"
#include "harp/launch/elastic_nodes.h"
#include "harp/launch/progress.h"
#include "harp/launch/worker_env.h"
#include "harp/plan/closed_form.h"
#include "harp/plan/plan_io.h"

namespace harp::launch {
namespace {

constexpr const char* kWho = "harp launch --elastic: ";

class LocalLauncher : public Launcher {
 public:
  StatusOr<LaunchResult> run(const LaunchOptions& options, std::ostream& out) override {
    return launch(options, out);
  }
};

// The last complete checkpoint of OUT (its `latest` file), or -1.
int latest_step(const std::string& out_dir) {
  std::ifstream in(out_dir + "/checkpoints/latest");
  int step = -1;
  return in >> step ? step : -1;
}

// "harp launch: MESSAGE" and the exit code of its status (as the command line's).
int fail(std::ostream& err, const Status& s) {
  err << "harp launch: " << s.message() << "\n";
  return s.code() == StatusCode::kInfeasible ? kExitInfeasible : kExitInput;
}

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

// One run of the controller: the state its attempts share.
class Run {
 public:
  Run(const ElasticOptions& o, cluster::Cluster c, const PlanFn& plan, const ClusterFn& reread, Launcher& launcher,
      Clock& clock, std::ostream& out, std::ostream& err)
      : o_(o), cluster_(std::move(c)), plan_(plan), reread_(reread), launcher_(launcher), clock_(clock), out_(out),
        err_(err), multi_(o.nnodes > 1),
        out_dir_(flag_value(o.command, "--out").empty() ? o.out_dir : flag_value(o.command, "--out")),
        elastic_dir_(out_dir_ + "/elastic") {}

  int run() {
    for (const char* owned : {"--plan", "--resume", "--nnodes"})
      for (const std::string& word : o_.command)
        if (word == owned) {
          err_ << kWho << "the worker command has " << owned
               << "; leave it out: the launcher gives each run its plan and --resume\n";
          return kExitUsage;
        }
    if (int rc = prepare(); rc != kExitOk) return rc;
    for (int attempt = 0;; ++attempt)
      if (int rc = run_attempt(attempt); rc >= 0) return rc;
  }

 private:
  // The folder, and across machines which machine hosts which devices and this
  // machine's reports left by an earlier run in the same OUT (removed).
  int prepare() {
    std::error_code ec;
    std::filesystem::create_directories(elastic_dir_, ec);
    if (ec) return fail(err_, io_error(elastic_dir_ + ": cannot create the folder: " + ec.message()));
    started_unix_ = clock_.unix_s();
    first_ids_.resize(static_cast<size_t>(cluster_.num_devices()));
    for (int d = 0; d < cluster_.num_devices(); ++d) first_ids_[static_cast<size_t>(d)] = d;
    if (!multi_) return kExitOk;
    auto split = MachineDevices::split(cluster_, o_.nnodes);
    if (!split.ok()) return fail(err_, split.status());
    machines_ = *split;
    for (const auto& entry : std::filesystem::directory_iterator(elastic_dir_, ec))
      if (entry.is_directory())
        std::filesystem::remove(entry.path() / ("node_" + std::to_string(o_.node_rank) + ".json"), ec);
    return kExitOk;
  }

  // Plans, launches and handles the outcome; an exit code to stop with, or -1 to go on.
  int run_attempt(int attempt) {
    const double plan_start = clock_.now_s();
    StatusOr<PlanAttempt> outcome = next_plan_ ? StatusOr<PlanAttempt>(*next_plan_) : plan_(drifted_cluster(cluster_, link_drift_), drift_);
    const double plan_s = next_plan_ ? replan_s_ : clock_.now_s() - plan_start;
    next_plan_.reset();
    if (!outcome.ok()) return fail(err_, outcome.status());
    if (!outcome->feasible) {
      err_ << kWho << "no plan fits the " << cluster_.num_devices() << " devices left: " << outcome->reason << "\n";
      return kExitInfeasible;
    }
    const plan::Plan& p = outcome->plan;
    current_ = p;
    current_drift_ = drift_;
    current_link_drift_ = link_drift_;
    adopting_ = false;
    drifts_seen_ = 0;
    probes_seen_ = 0;
    quiet_probe_step_ = -1;
    const std::string plan_file = elastic_dir_ + "/plan_" + std::to_string(attempt) + ".json";
    if (Status s = plan::save_plan(p, plan_file); !s.ok()) return fail(err_, s);
    devices_ = p.used_devices();  // rank r runs devices_[r]
    const int resume_from = latest_step(out_dir_);
    err_ << kWho << (attempt == 0 ? "plan" : "new plan") << " " << plan_file << ": " << p.num_stages()
         << " stages on " << devices_.size() << " of " << cluster_.num_devices() << " devices, predicted "
         << fmt_time(p.predicted.iteration_s) << " per step (planned in " << fmt("%.1f ms", plan_s * 1e3) << ")"
         << (resume_from >= 0 ? "; resuming from step " + std::to_string(resume_from) : std::string()) << "\n";
    if (!pending_.is_null()) pending_["replan_s"] = plan_s;

    LaunchOptions options;
    if (int rc = place_ranks(attempt, &options); rc >= 0) return rc;
    options.command = o_.command;
    if (flag_value(o_.command, "--job").empty()) options.command.insert(options.command.end(), {"--job", o_.job_file});
    options.command.insert(options.command.end(), {"--plan", plan_file});
    // Re-planning also watches the links the plan routes around (their recovery).
    if (o_.replan_min_gain > 0 && o_.link_probe_every > 0 && flag_value(o_.command, "--link-probe-every").empty())
      options.command.insert(options.command.end(), {"--link-probe-every", std::to_string(o_.link_probe_every)});
    if (resume_from >= 0) options.command.push_back("--resume");
    options.grace_s = o_.grace_s;
    options.clock = &clock_;
    WorkerEnv extra;
    extra.emulate = o_.emulate;
    for (const auto& [k, v] : extra.harp_env()) options.env[k] = v;
    const double launched_unix = clock_.unix_s();
    if (o_.replan_min_gain > 0 && !multi_) options.stop_when = [this, attempt, launched_unix] {
      return watch_drifts(attempt, launched_unix);
    };
    auto result = launcher_.run(options, out_);
    out_.flush();
    if (!result.ok()) return fail(err_, result.status());
    // Rank 0's records of this attempt, when rank 0 ran here.
    const bool rank0_here = !multi_ || std::find(options.ranks.begin(), options.ranks.end(), 0) != options.ranks.end();
    const RunProgress progress = rank0_here ? read_progress(out_dir_, launched_unix) : RunProgress{};
    if (progress.steps_done >= 0) steps_done_ = progress.steps_done;
    if (!pending_.is_null()) log_recovery(options, rank0_here, progress, launched_unix);
    err_ << "harp launch: " << result->summary << "\n";
    return after_launch(attempt, *result, progress);
  }

  // Which ranks run on this machine (all of them on one); an exit code, or -1.
  int place_ranks(int attempt, LaunchOptions* options) {
    options->nproc = static_cast<int>(devices_.size());
    ran_.assign(static_cast<size_t>(o_.nnodes), !multi_);
    if (!multi_ && o_.place) {
      std::vector<int> first;
      for (int d : devices_) first.push_back(first_ids_.at(static_cast<size_t>(d)));
      auto placed = o_.place(first, options);
      if (!placed.ok()) return fail(err_, placed.status());
      if (!placed->empty()) err_ << kWho << *placed << "\n";
    }
    if (!multi_) return -1;
    // This machine runs the ranks whose devices it hosts; node 0 hosts the rendezvous.
    for (int r = 0; r < static_cast<int>(devices_.size()); ++r)
      for (int m = 0; m < o_.nnodes; ++m)
        if (machines_.hosts(m, devices_[static_cast<size_t>(r)])) {
          ran_[static_cast<size_t>(m)] = true;
          if (m == o_.node_rank) options->ranks.push_back(r);
        }
    if (!ran_[0]) {
      err_ << kWho << "the new plan uses no device of node 0, which hosts the rendezvous at " << o_.master_addr
           << "; elastic restarts across machines need node 0; stopping\n";
      return kExitInput;
    }
    if (options->ranks.empty()) {
      err_ << kWho << "node " << o_.node_rank << " hosts no device of the new plan; leaving\n";
      return kExitOk;
    }
    if (o_.master_port + attempt > 65535) {
      err_ << kWho << "--master-port " << o_.master_port << " + " << attempt
           << " restarts is past 65535; use a lower port\n";
      return kExitUsage;
    }
    options->nproc = static_cast<int>(options->ranks.size());
    options->world_size = static_cast<int>(devices_.size());
    options->nnodes = o_.nnodes;
    options->node_rank = o_.node_rank;
    options->master_addr = o_.master_addr;
    options->master_port = o_.master_port + attempt;  // a fresh store per attempt
    options->store_host = o_.node_rank == 0 ? 0 : LaunchOptions::kElsewhere;
    options->forward_usr1 = false;  // re-admission is for one machine (docs/runtime.md)
    options->env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    return -1;
  }

  // The previous recovery's restart: relaunch to the first step done after it.
  void log_recovery(const LaunchOptions& options, bool rank0_here, const RunProgress& progress,
                    double launched_unix) {
    pending_["restart_s"] = progress.first_step_unix >= 0 ? Json(progress.first_step_unix - launched_unix) : Json();
    pending_["resumed_step"] = progress.resumed_step;
    const int at = pending_.value("failed_at_step", pending_.value("stopped_at_step", 0));
    pending_["steps_lost"] = progress.resumed_step >= 0 ? Json(at - progress.resumed_step) : Json(at);
    if (pending_.contains("measured_old_s") && progress.resumed_step >= 0) {
      // The new plan's steps after its first (which holds the warm-up).
      const double after = median_step_s(progress, progress.resumed_step + 1, 1 << 30);
      pending_["measured_new_s"] = after > 0 ? Json(after) : Json();
      if (after > 0) {
        const double old_s = pending_["measured_old_s"].get<double>();
        pending_["measured_gain"] = 1 - after / old_s;
        err_ << kWho << "the plan adopted for the drift measured " << fmt_time(after) << " per step (predicted "
             << fmt_time(pending_["estimated_new_s"].get<double>()) << ", "
             << fmt("%+.1f%%", 100 * (pending_["estimated_new_s"].get<double>() / after - 1)) << "), the old one "
             << fmt_time(old_s) << " under the drift: " << fmt("%.2fx", old_s / after) << "\n";
      }
    }
    if (!rank0_here) {  // rank 0 runs on another machine: the record is node 0's
      err_ << kWho << "restarted " << options.nproc << " of the new plan's ranks here\n";
    } else {
      err_ << kWho
           << (pending_.contains("readmitted")          ? "re-admission"
               : pending_.contains("measured_old_s") ? "re-plan on drift"
                                                     : "recovery")
           << ": stopped in "
           << (pending_["stop_s"].is_number() ? fmt("%.2f s", pending_["stop_s"].get<double>()) : std::string("?"))
           << ", re-planned in " << fmt("%.1f ms", pending_["replan_s"].get<double>() * 1e3)
           << ", first step after the restart "
           << (pending_["restart_s"].is_null() ? std::string("never")
                                               : fmt("%.2f s", pending_["restart_s"].get<double>()))
           << " after it; " << pending_["steps_lost"].dump() << " steps lost\n";
    }
    append_record(pending_);
    pending_ = Json();
  }

  // After a launch: the end, a re-admission, or a recovery; an exit code, or -1.
  int after_launch(int attempt, const LaunchResult& result, const RunProgress& progress) {
    if (result.exit_code == 0 && progress.stopped_step >= 0 && multi_) {
      // A worker got SIGUSR1 from elsewhere: the other machines cannot tell, so no re-plan.
      err_ << kWho << "the run stopped on request at step " << progress.stopped_step
           << "; across machines devices are not re-admitted: run the same commands again to resume\n";
      return kExitOk;
    }
    if (!(result.exit_code == 0 && progress.stopped_step >= 0 && adopting_)) next_plan_.reset();  // not stopped for it
    if (result.exit_code == 0 && progress.stopped_step >= 0 && adopting_) {
      pending_ = std::move(adopted_);
      adopted_ = Json();
      pending_["stopped_at_step"] = progress.stopped_step;
      pending_["stop_s"] = result.forwarded_s >= 0 ? Json(result.forwarded_s) : Json();
      err_ << kWho << "stopped after the checkpoint of step " << progress.stopped_step
           << " to adopt the plan made for the drift\n";
      return -1;
    }
    if (result.exit_code == 0 && progress.stopped_step >= 0) return readmit(attempt, result, progress);
    if (result.exit_code == 0) return kExitOk;
    return recover(attempt, result);
  }

  // While a launch runs (LaunchOptions::stop_when): the drifts rank 0 recorded since it
  // started, each judged once; true stops the workers at their next checkpoint.
  bool watch_drifts(int attempt, double launched_unix) {
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
  bool judge_drift(int attempt, const DriftRecord& d, const RunProgress& p, double launched_unix) {
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
  bool judge_probe(int attempt, const ProbeRecord& q, const RunProgress& p, double launched_unix) {
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

  int subcluster_index(const std::string& name) const {
    for (size_t i = 0; i < cluster_.subclusters.size(); ++i)
      if (cluster_.subclusters[i].name == name) return static_cast<int>(i);
    return -1;
  }

  Json links_json() const {
    Json links = Json::object();
    for (const auto& [pair, f] : link_drift_) links[pair.first + "-" + pair.second] = f;
    return links;
  }

  // Plans over the calibrated costs and decides whether the plan pays for its restart:
  // `record` so far; the running plan's closed form on the costs measured now, its measured
  // step now, its measured step before the drift (or -1) and what the closed form leaves
  // out of this run's steps. True when adopted (the workers stop at the next checkpoint).
  bool replan_and_decide(int attempt, Json record, const RunProgress& p, double launched_unix, double old_pred,
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
    const bool adopt = !same && left > 0 && gain >= o_.replan_min_gain;
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
         << (adopt ? "; adopting it at the checkpoint of step " + std::to_string(stop_at)
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

  void append_record(const Json& record) {
    if (o_.node_rank == 0) std::ofstream(elastic_dir_ + "/recoveries.jsonl", std::ios::app) << record.dump() << "\n";
  }

  // SIGUSR1: re-read the cluster and plan over it.
  int readmit(int attempt, const LaunchResult& result, const RunProgress& progress) {
    const int before = cluster_.num_devices();
    auto reread = reread_();
    if (reread.ok()) {
      cluster_ = *reread;
      first_ids_.resize(static_cast<size_t>(cluster_.num_devices()));
      for (int d = 0; d < cluster_.num_devices(); ++d) first_ids_[static_cast<size_t>(d)] = d;
    } else {
      err_ << kWho << "cannot re-read the cluster: " << reread.status().to_string() << "; keeping the " << before
           << " devices\n";
    }
    pending_ = {{"attempt", attempt + 1},
                {"readmitted", cluster_.num_devices() - before},
                {"stopped_at_step", progress.stopped_step},
                {"stop_s", result.forwarded_s >= 0 ? Json(result.forwarded_s) : Json()},
                {"devices_left", cluster_.num_devices()}};
    err_ << kWho << "stopped after the checkpoint of step " << progress.stopped_step
         << " on SIGUSR1; re-planning over the " << cluster_.num_devices()
         << " devices of the job's cluster, read again (" << before << " before)\n";
    return -1;
  }

  // Every machine's lost devices (a machine not heard from is lost whole); an exit code
  // on failure, else -1 with *lost filled.
  int gather_lost(int attempt, const LaunchResult& result, std::vector<int>* lost, double* exchange_s) {
    for (int r : result.lost_ranks) lost->push_back(devices_.at(static_cast<size_t>(r)));
    if (!multi_) return -1;
    const double exchange_start = clock_.now_s();
    auto reports = exchange_reports(elastic_dir_, attempt, o_.node_rank, ran_,
                                    MachineReport{true, *lost, result.exit_code}, o_.report_wait_s,
                                    started_unix_ - 60, clock_);
    *exchange_s = clock_.now_s() - exchange_start;
    if (!reports.ok()) return fail(err_, reports.status());
    lost->clear();
    for (int m = 0; m < o_.nnodes; ++m) {
      const MachineReport& rep = (*reports)[static_cast<size_t>(m)];
      if (!ran_[static_cast<size_t>(m)]) continue;
      if (!rep.heard)
        err_ << kWho << "node " << m << " did not report within " << fmt("%.0f s", o_.report_wait_s)
             << ": its devices are lost\n";
      for (int d : rep.heard ? rep.lost : machines_.of(m))
        if (std::find(lost->begin(), lost->end(), d) == lost->end()) lost->push_back(d);
    }
    return -1;
  }

  // Ranks were lost: drop their devices and plan again; an exit code, or -1.
  int recover(int attempt, const LaunchResult& result) {
    std::vector<int> lost;  // device ids
    double exchange_s = 0;  // waiting for the other machines' reports
    if (int rc = gather_lost(attempt, result, &lost, &exchange_s); rc >= 0) return rc;
    if (lost.empty()) {
      err_ << kWho << "no rank was lost (a worker failed on its own, exit code " << result.exit_code
           << "); not restarting\n";
      return result.exit_code;
    }
    if (++restarts_ > o_.max_restarts) {
      err_ << kWho << o_.max_restarts << " restarts spent (--max-restarts); stopping\n";
      return result.exit_code;
    }
    // Drop the lost devices, highest id first so the others keep their ids meanwhile.
    std::sort(lost.rbegin(), lost.rend());
    std::vector<int> lost_ranks;
    for (int r = 0; r < static_cast<int>(devices_.size()); ++r)
      if (std::find(lost.begin(), lost.end(), devices_[static_cast<size_t>(r)]) != lost.end()) lost_ranks.push_back(r);
    std::string names;
    for (int d : lost) {
      names += (names.empty() ? "" : ", ") + std::to_string(d);
      if (multi_) machines_.remove(cluster_, d);
      const std::vector<int> ids = cluster::device_ids_without(cluster_, d);
      std::vector<int> first(static_cast<size_t>(std::max(0, cluster_.num_devices() - 1)));
      for (size_t old_id = 0; old_id < ids.size(); ++old_id)
        if (ids[old_id] >= 0) first.at(static_cast<size_t>(ids[old_id])) = first_ids_.at(old_id);
      first_ids_ = std::move(first);
      cluster_ = cluster::without_device(cluster_, d);
    }
    pending_ = {{"attempt", attempt + 1},     {"lost_ranks", lost_ranks},
                {"lost_devices", lost},       {"failed_at_step", steps_done_},
                {"stop_s", result.stop_s},    {"devices_left", cluster_.num_devices()}};
    if (multi_) pending_["exchange_s"] = exchange_s;
    err_ << kWho << "lost rank(s) " << Json(lost_ranks).dump() << " (device " << names << ")"
         << (steps_done_ >= 0 ? " after step " + std::to_string(steps_done_) : std::string())
         << (multi_ ? fmt(" (reports exchanged in %.2f s)", exchange_s) : std::string()) << "; re-planning over "
         << cluster_.num_devices() << " devices\n";
    if (cluster_.num_devices() == 0) {
      err_ << kWho << "no device is left; stopping\n";
      return kExitInfeasible;
    }
    return -1;
  }

  const ElasticOptions& o_;
  cluster::Cluster cluster_;
  const PlanFn& plan_;
  const ClusterFn& reread_;
  Launcher& launcher_;
  Clock& clock_;
  std::ostream& out_;
  std::ostream& err_;
  const bool multi_;
  const std::string out_dir_;
  const std::string elastic_dir_;
  double started_unix_ = 0;
  MachineDevices machines_;
  std::vector<int> devices_;  // the current plan's, rank r on devices_[r]
  std::vector<int> first_ids_;  // per device of cluster_, its id in the first cluster
  std::vector<bool> ran_;     // machines with workers in the current attempt
  Json pending_;              // the recovery whose restart is being timed
  int restarts_ = 0;          // after lost ranks (--max-restarts)
  int steps_done_ = -1;       // as rank 0 last recorded, in any attempt
  // Re-planning on drift.
  ComputeDrift drift_;                     // what the run has measured so far
  plan::Plan current_;                     // the running plan,
  ComputeDrift current_drift_;             // made for these factors
  LinkDrift link_drift_, current_link_drift_;  // the same for the links
  std::optional<PlanAttempt> next_plan_;   // adopted, for the next attempt
  Json adopted_;                           // its record
  double replan_s_ = 0;
  bool adopting_ = false;                  // this attempt stops for next_plan_
  int drifts_seen_ = 0;                    // of this attempt's records
  int probes_seen_ = 0;                    // the same for link probes
  int quiet_probe_step_ = -1;              // this attempt's last probe that agreed with the costs
  int candidates_ = 0;
  double next_poll_s_ = 0;
};

}  // namespace

std::string flag_value(const std::vector<std::string>& command, const std::string& flag) {
  for (size_t i = 0; i + 1 < command.size(); ++i)
    if (command[i] == flag) return command[i + 1];
  return "";
}

Launcher& Launcher::local() {
  static LocalLauncher launcher;
  return launcher;
}

ElasticController::ElasticController(ElasticOptions options, cluster::Cluster cluster, PlanFn plan,
                                     ClusterFn reread, Launcher& launcher, Clock& clock)
    : o_(std::move(options)), cluster_(std::move(cluster)), plan_(std::move(plan)), reread_(std::move(reread)),
      launcher_(launcher), clock_(clock) {}

int ElasticController::run(std::ostream& out, std::ostream& err) {
  return Run(o_, cluster_, plan_, reread_, launcher_, clock_, out, err).run();
}

}  // namespace harp::launch
