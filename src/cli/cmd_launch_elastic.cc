// `harp launch --elastic --job JOB -- harp train [flags]`: elastic training on one
// machine (cmd_launch.h). Lost ranks are the ones that died by a signal before the
// launcher stopped anyone, or that ignored its SIGTERM (stalled): their devices leave
// the cluster (cluster::without_device) and the planner runs again over the rest.
// SIGUSR1 to the launcher re-admits devices: the workers stop after their next
// checkpoint, the job's cluster file is read again (every device it lists is taken as
// available) and the planner runs over it.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "cmd_launch.h"
#include "elastic_nodes.h"
#include "harp/cluster/cluster.h"
#include "harp/common/document.h"
#include "harp/job/job.h"
#include "harp/launch/launcher.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/plan_job.h"
#include "table.h"

namespace harp::cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Forwards the workers' lines and watches rank 0's: the last "step K/N" (steps done)
// and when the first step after a resume ends.
class StepWatcher : public std::streambuf {
 public:
  explicit StepWatcher(std::ostream& out) : out_(out) {}
  int last_step = -1;             // steps done, as rank 0 last printed
  int resumed_step = -1;          // "resumed from step S"
  int stopped_step = -1;          // "stopped at step S on request" (SIGUSR1)
  double first_step_s = -1;       // seconds from start() to the first step line
  void start() {
    started_ = Clock::now();
    first_step_s = -1;
    resumed_step = -1;
    stopped_step = -1;
  }

 protected:
  int overflow(int c) override {
    if (c == EOF) return 0;
    line_ += static_cast<char>(c);
    if (c == '\n') {
      scan(line_);
      out_ << line_;
      line_.clear();
    }
    return c;
  }
  int sync() override {
    out_.flush();
    return 0;
  }

 private:
  void scan(const std::string& line) {
    const std::string rank0 = "[rank 0] ";
    if (line.rfind(rank0, 0) != 0) return;
    const std::string rest = line.substr(rank0.size());
    int k = 0;
    if (std::sscanf(rest.c_str(), "step %d/", &k) == 1) {
      last_step = k;
      if (first_step_s < 0) first_step_s = since(started_);
    } else if (std::sscanf(rest.c_str(), "resumed from step %d", &k) == 1) {
      resumed_step = k;
    } else if (std::sscanf(rest.c_str(), "stopped at step %d on request", &k) == 1) {
      stopped_step = k;
    }
  }
  std::ostream& out_;
  std::string line_;
  Clock::time_point started_ = Clock::now();
};

// The value after `flag` in the worker command, or "".
std::string flag_value(const std::vector<std::string>& command, const std::string& flag) {
  for (size_t i = 0; i + 1 < command.size(); ++i)
    if (command[i] == flag) return command[i + 1];
  return "";
}

// The last complete checkpoint of OUT (its `latest` file), or -1.
int latest_step(const std::string& out_dir) {
  std::ifstream in(out_dir + "/checkpoints/latest");
  int step = -1;
  return in >> step ? step : -1;
}

}  // namespace

int run_elastic(const ElasticOptions& o, Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("launch", job.status());
  for (const char* owned : {"--plan", "--resume", "--nnodes"})
    for (const std::string& word : o.command)
      if (word == owned) {
        ctx.err << "harp launch --elastic: the worker command has " << owned
                << "; leave it out: the launcher gives each run its plan and --resume\n";
        return ctx.rc = kExitUsage;
      }
  std::string out_dir = flag_value(o.command, "--out");
  if (out_dir.empty()) out_dir = job->training.out;
  const std::string elastic_dir = out_dir + "/elastic";
  std::error_code ec;
  std::filesystem::create_directories(elastic_dir, ec);
  if (ec) return ctx.fail("launch", io_error(elastic_dir + ": cannot create the folder: " + ec.message()));
  // Across machines: which machine hosts which devices, and the reports' folder (this
  // machine's files left by an earlier run in the same OUT are removed first).
  const bool multi = o.nnodes > 1;
  const double started_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  MachineDevices machines;
  if (multi) {
    auto split = MachineDevices::split(job->cluster, o.nnodes);
    if (!split.ok()) return ctx.fail("launch", split.status());
    machines = *split;
    for (const auto& entry : std::filesystem::directory_iterator(elastic_dir, ec))
      if (entry.is_directory()) std::filesystem::remove(entry.path() / ("node_" + std::to_string(o.node_rank) + ".json"), ec);
  }
  StepWatcher watcher(ctx.out);
  std::ostream watched(&watcher);
  Json pending;  // the recovery whose restart is being timed
  int restarts = 0;  // after lost ranks (--max-restarts); re-admissions are not counted
  for (int attempt = 0;; ++attempt) {
    const auto plan_start = Clock::now();
    auto outcome = planner::plan_job(*job, planner::PlanRequest{});
    const double plan_s = since(plan_start);
    if (!outcome.ok()) return ctx.fail("launch", outcome.status());
    if (!outcome->result.feasible) {
      ctx.err << "harp launch --elastic: no plan fits the " << job->cluster.num_devices()
              << " devices left: " << outcome->result.reason << "\n";
      return ctx.rc = kExitInfeasible;
    }
    const plan::Plan& p = outcome->result.plan;
    const std::string plan_file = elastic_dir + "/plan_" + std::to_string(attempt) + ".json";
    if (Status s = plan::save_plan(p, plan_file); !s.ok()) return ctx.fail("launch", s);
    const std::vector<int> devices = p.used_devices();  // rank r runs devices[r]
    const int resume_from = latest_step(out_dir);
    ctx.err << "harp launch --elastic: " << (attempt == 0 ? "plan" : "new plan") << " " << plan_file << ": "
            << p.num_stages() << " stages on " << devices.size() << " of " << job->cluster.num_devices()
            << " devices, predicted " << fmt_time(p.predicted.iteration_s) << " per step (planned in "
            << fmt("%.1f ms", plan_s * 1e3) << ")"
            << (resume_from >= 0 ? "; resuming from step " + std::to_string(resume_from) : std::string()) << "\n";
    if (!pending.is_null()) pending["replan_s"] = plan_s;

    launch::LaunchOptions options;
    options.nproc = static_cast<int>(devices.size());
    std::vector<bool> ran(static_cast<size_t>(o.nnodes), !multi);  // machines with workers
    if (multi) {
      // This machine runs the ranks whose devices it hosts; node 0 hosts the rendezvous.
      for (int r = 0; r < static_cast<int>(devices.size()); ++r)
        for (int m = 0; m < o.nnodes; ++m)
          if (machines.hosts(m, devices[static_cast<size_t>(r)])) {
            ran[static_cast<size_t>(m)] = true;
            if (m == o.node_rank) options.ranks.push_back(r);
          }
      if (!ran[0]) {
        ctx.err << "harp launch --elastic: the new plan uses no device of node 0, which hosts the rendezvous at "
                << o.master_addr << "; elastic restarts across machines need node 0; stopping\n";
        return ctx.rc = kExitInput;
      }
      if (options.ranks.empty()) {
        ctx.err << "harp launch --elastic: node " << o.node_rank << " hosts no device of the new plan; leaving\n";
        return ctx.rc = kExitOk;
      }
      if (o.master_port + attempt > 65535) {
        ctx.err << "harp launch --elastic: --master-port " << o.master_port << " + " << attempt
                << " restarts is past 65535; use a lower port\n";
        return ctx.rc = kExitUsage;
      }
      options.nproc = static_cast<int>(options.ranks.size());
      options.world_size = static_cast<int>(devices.size());
      options.nnodes = o.nnodes;
      options.node_rank = o.node_rank;
      options.master_addr = o.master_addr;
      options.master_port = o.master_port + attempt;  // a fresh store per attempt
      options.store_host = o.node_rank == 0 ? 0 : launch::LaunchOptions::kElsewhere;
      options.forward_usr1 = false;  // re-admission is for one machine (docs/runtime.md)
      options.env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    }
    options.command = o.command;
    if (flag_value(o.command, "--job").empty()) options.command.insert(options.command.end(), {"--job", o.job_file});
    options.command.insert(options.command.end(), {"--plan", plan_file});
    if (resume_from >= 0) options.command.push_back("--resume");
    options.grace_s = o.grace_s;
    if (o.emulate) options.env["HARP_EMULATE"] = "1";
    watcher.start();
    auto result = launch::launch(options, watched);
    watched.flush();
    if (!result.ok()) return ctx.fail("launch", result.status());
    if (!pending.is_null()) {
      // The previous recovery's restart: relaunch to the first step done after it.
      pending["restart_s"] = watcher.first_step_s >= 0 ? Json(watcher.first_step_s) : Json();
      pending["resumed_step"] = watcher.resumed_step;
      const int at = pending.value("failed_at_step", pending.value("stopped_at_step", 0));
      pending["steps_lost"] = watcher.resumed_step >= 0 ? Json(at - watcher.resumed_step) : Json(at);
      if (watcher.last_step < 0) {  // rank 0 runs on another machine: the record is node 0's
        ctx.err << "harp launch --elastic: restarted " << options.nproc << " of the new plan's ranks here\n";
      } else {
        ctx.err << "harp launch --elastic: " << (pending.contains("readmitted") ? "re-admission" : "recovery")
                << ": stopped in "
                << (pending["stop_s"].is_number() ? fmt("%.2f s", pending["stop_s"].get<double>()) : std::string("?"))
                << ", re-planned in "
                << fmt("%.1f ms", pending["replan_s"].get<double>() * 1e3) << ", first step after the restart "
                << (pending["restart_s"].is_null() ? std::string("never") : fmt("%.2f s", pending["restart_s"].get<double>()))
                << " after it; " << pending["steps_lost"].dump() << " steps lost\n";
      }
      if (o.node_rank == 0) std::ofstream(elastic_dir + "/recoveries.jsonl", std::ios::app) << pending.dump() << "\n";
      pending = Json();
    }
    ctx.err << "harp launch: " << result->summary << "\n";
    if (result->exit_code == 0 && watcher.stopped_step >= 0 && multi) {
      // A worker got SIGUSR1 from elsewhere: the other machines cannot tell, so no re-plan.
      ctx.err << "harp launch --elastic: the run stopped on request at step " << watcher.stopped_step
              << "; across machines devices are not re-admitted: run the same commands again to resume\n";
      return ctx.rc = kExitOk;
    }
    if (result->exit_code == 0 && watcher.stopped_step >= 0) {  // SIGUSR1: re-read the cluster
      const int before = job->cluster.num_devices();
      auto reread = job::load_job(o.job_file);
      if (reread.ok()) {
        job->cluster = reread->cluster;
      } else {
        ctx.err << "harp launch --elastic: cannot re-read the cluster: " << reread.status().to_string()
                << "; keeping the " << before << " devices\n";
      }
      pending = {{"attempt", attempt + 1},
                 {"readmitted", job->cluster.num_devices() - before},
                 {"stopped_at_step", watcher.stopped_step},
                 {"stop_s", result->forwarded_s >= 0 ? Json(result->forwarded_s) : Json()},
                 {"devices_left", job->cluster.num_devices()}};
      ctx.err << "harp launch --elastic: stopped after the checkpoint of step " << watcher.stopped_step
              << " on SIGUSR1; re-planning over the " << job->cluster.num_devices()
              << " devices of the job's cluster, read again (" << before << " before)\n";
      continue;
    }
    if (result->exit_code == 0) return ctx.rc = kExitOk;
    std::vector<int> lost;  // device ids
    double exchange_s = 0;  // waiting for the other machines' reports
    for (int r : result->lost_ranks) lost.push_back(devices.at(static_cast<size_t>(r)));
    if (multi) {  // every machine's lost devices; a machine not heard from is lost whole
      const double wait_s = 2 * job->training.timeout_s + o.grace_s + 5;
      const auto exchange_start = Clock::now();
      auto reports = exchange_reports(elastic_dir, attempt, o.node_rank, ran,
                                      MachineReport{true, lost, result->exit_code}, wait_s, started_unix - 60);
      exchange_s = since(exchange_start);
      if (!reports.ok()) return ctx.fail("launch", reports.status());
      lost.clear();
      for (int m = 0; m < o.nnodes; ++m) {
        const MachineReport& rep = (*reports)[static_cast<size_t>(m)];
        if (!ran[static_cast<size_t>(m)]) continue;
        if (!rep.heard)
          ctx.err << "harp launch --elastic: node " << m << " did not report within " << fmt("%.0f s", wait_s)
                  << ": its devices are lost\n";
        for (int d : rep.heard ? rep.lost : machines.of(m))
          if (std::find(lost.begin(), lost.end(), d) == lost.end()) lost.push_back(d);
      }
    }
    if (lost.empty()) {
      ctx.err << "harp launch --elastic: no rank was lost (a worker failed on its own, exit code "
              << result->exit_code << "); not restarting\n";
      return ctx.rc = result->exit_code;
    }
    if (++restarts > o.max_restarts) {
      ctx.err << "harp launch --elastic: " << o.max_restarts << " restarts spent (--max-restarts); stopping\n";
      return ctx.rc = result->exit_code;
    }
    // Drop the lost devices, highest id first so the others keep their ids meanwhile.
    std::sort(lost.rbegin(), lost.rend());
    std::vector<int> lost_ranks;
    for (int r = 0; r < static_cast<int>(devices.size()); ++r)
      if (std::find(lost.begin(), lost.end(), devices[static_cast<size_t>(r)]) != lost.end()) lost_ranks.push_back(r);
    std::string names;
    for (int d : lost) {
      names += (names.empty() ? "" : ", ") + std::to_string(d);
      if (multi) machines.remove(job->cluster, d);
      job->cluster = cluster::without_device(job->cluster, d);
    }
    pending = {{"attempt", attempt + 1},
               {"lost_ranks", lost_ranks},
               {"lost_devices", lost},
               {"failed_at_step", watcher.last_step},
               {"stop_s", result->stop_s},
               {"devices_left", job->cluster.num_devices()}};
    if (multi) pending["exchange_s"] = exchange_s;
    ctx.err << "harp launch --elastic: lost rank(s) " << Json(lost_ranks).dump() << " (device " << names
            << ")" << (watcher.last_step >= 0 ? " after step " + std::to_string(watcher.last_step) : std::string())
            << (multi ? fmt(" (reports exchanged in %.2f s)", exchange_s) : std::string())
            << "; re-planning over " << job->cluster.num_devices()
            << " devices\n";
    if (job->cluster.num_devices() == 0) {
      ctx.err << "harp launch --elastic: no device is left; stopping\n";
      return ctx.rc = kExitInfeasible;
    }
  }
}

}  // namespace harp::cli
