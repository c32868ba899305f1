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
#include "replan.h"

namespace harp::launch {
namespace {

constexpr const char* kWho = kElasticWho;

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

// One run of the controller: the state its attempts share.
class Run {
 public:
  Run(const ElasticOptions& o, cluster::Cluster c, const PlanFn& plan, const ClusterFn& reread, Launcher& launcher,
      Clock& clock, std::ostream& out, std::ostream& err)
      : o_(o), cluster_(std::move(c)), plan_(plan), reread_(reread), launcher_(launcher), clock_(clock), out_(out),
        err_(err), multi_(o.nnodes > 1),
        out_dir_(flag_value(o.command, "--out").empty() ? o.out_dir : flag_value(o.command, "--out")),
        elastic_dir_(out_dir_ + "/elastic"), replan_(o, plan, clock, err, out_dir_) {}

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
    std::optional<PlanAttempt> next = replan_.take_next_plan();
    StatusOr<PlanAttempt> outcome = next ? StatusOr<PlanAttempt>(*next) : replan_.plan_over(cluster_);
    const double plan_s = next ? replan_.replan_s() : clock_.now_s() - plan_start;
    if (!outcome.ok()) return fail(err_, outcome.status());
    if (!outcome->feasible) {
      err_ << kWho << "no plan fits the " << cluster_.num_devices() << " devices left: " << outcome->reason << "\n";
      return kExitInfeasible;
    }
    plan::Plan& p = outcome->plan;
    // Which machine runs each device is this launch's to say (a degraded node is a
    // subcluster of its own in the cluster left, yet still on its machine).
    for (plan::Stage& st : p.stages) {
      st.nodes.clear();
      if (multi_)
        for (int d : st.devices)
          for (int m = 0; m < o_.nnodes; ++m)
            if (machines_.hosts(m, d)) st.nodes.push_back(m);
      if (st.nodes.size() != st.devices.size()) st.nodes.clear();
    }
    replan_.start(p, cluster_);
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
      return replan_.watch_drifts(attempt, launched_unix);
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
    const bool for_the_drift = result.exit_code == 0 && progress.stopped_step >= 0 && replan_.adopting();
    if (!for_the_drift) replan_.drop_next_plan();  // not stopped for it
    if (for_the_drift) {
      pending_ = replan_.take_adopted_record();
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

  void append_record(const Json& record) { append_recovery(elastic_dir_, o_.node_rank, record); }

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
  Replanner replan_;          // re-planning on drift
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
