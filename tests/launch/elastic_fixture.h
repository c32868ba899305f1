// The elastic controller's test fixture (elastic_controller_test.cc,
// elastic_replan_test.cc): a fake clock, a fake launcher that plays scripted attempts, the
// run folder rank 0 would write, and the clusters and plans they share.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "harp/common/document.h"
#include "harp/common/exit_code.h"
#include "harp/launch/elastic.h"
#include "harp/launch/progress.h"
#include "harp/launch/worker_env.h"
#include "harp/plan/closed_form.h"
#include "harp/plan/plan_io.h"
#include "testutil/temp_dir.h"

namespace harp::launch {

class FakeClock : public Clock {
 public:
  double now_s() override { return t_; }
  double unix_s() override { return 1.7e9 + t_; }
  void sleep_s(double seconds) override {
    t_ += seconds;
    ++sleeps;
  }
  void advance(double seconds) { t_ += seconds; }
  int sleeps = 0;

 private:
  double t_ = 100.0;
};

// One device per node, `n` nodes: losing a device drops a node.
inline cluster::Cluster cpus(int n) {
  cluster::Cluster c;
  c.name = "cpus";
  cluster::DeviceType d;
  d.name = "cpu";
  c.devices["cpu"] = d;
  cluster::Subcluster s;
  s.name = "pool";
  s.device = "cpu";
  s.nodes = n;
  s.intra_node = s.inter_node = {10.0, 1e-5};
  c.subclusters.push_back(s);
  return c;
}

// A plan of one stage per device, so rank r runs device r.
inline StatusOr<PlanAttempt> one_stage_per_device(const cluster::Cluster& c, const ComputeDrift&) {
  PlanAttempt a;
  a.feasible = true;
  for (int d = 0; d < c.num_devices(); ++d) {
    plan::Stage st;
    st.devices = {d};
    a.plan.stages.push_back(st);
  }
  a.plan.predicted.iteration_s = 0.5;
  return a;
}

// Rank 0's records and the checkpoint marker, as a worker run writes them.
struct RunFolder {
  std::string out;
  Clock* clock;
  void step(int s) { write({{"step", s}, {"loss", 1.0}}); }
  void timed_step(int s, double seconds, Json extra = Json::object()) {
    extra.update({{"step", s}, {"loss", 1.0}, {"iteration_s", seconds}});
    write(extra);
  }
  void drift(int after_steps, int stage, std::vector<double> stage_ratios) {
    write({{kProgressDriftKey, after_steps},
           {"stage", stage},
           {"ratio", stage_ratios.at(static_cast<size_t>(stage))},
           {"stage_ratios", stage_ratios}});
  }
  // A link's drift with every stage's and link's level and baseline.
  void link_drift(int after_steps, int link, std::vector<double> stage_s, std::vector<double> link_measured_s,
                  std::vector<double> link_baseline_s) {
    std::vector<double> ratios;
    for (size_t l = 0; l < link_measured_s.size(); ++l) ratios.push_back(link_measured_s[l] / link_baseline_s[l]);
    write({{kProgressDriftKey, after_steps},
           {"stage", -1},
           {"link", link},
           {"ratio", ratios.at(static_cast<size_t>(link))},
           {"stage_ratios", std::vector<double>(stage_s.size(), 1.0)},
           {"stage_measured_s", stage_s},
           {"stage_baseline_s", stage_s},
           {"link_ratios", ratios},
           {"link_measured_s", link_measured_s},
           {"link_baseline_s", link_baseline_s}});
  }
  void resumed_step(int s) { write({{"step", s}, {"loss", 1.0}, {kProgressResumedKey, s}}); }
  void stopping_step(int s) { write({{"step", s - 1}, {"loss", 1.0}, {kProgressStoppedKey, s}}); }
  void checkpoint(int s) {
    std::filesystem::create_directories(out + "/checkpoints");
    std::ofstream(out + "/checkpoints/latest") << s << "\n";
  }
  void write(Json record) {
    record[kProgressWallKey] = clock->unix_s();
    std::ofstream(out + "/metrics.jsonl", std::ios::app) << record.dump() << "\n";
  }
};

// Each call plays the next scripted attempt: it sees the options and the folder and
// returns launch()'s answer. Starting the workers takes 10 ms of the clock, their exit
// another 10.
class FakeLauncher : public Launcher {
 public:
  explicit FakeLauncher(FakeClock& clock) : clock_(clock) {}
  using Attempt = std::function<LaunchResult(const LaunchOptions&)>;
  std::vector<Attempt> script;
  std::vector<LaunchOptions> seen;
  StatusOr<LaunchResult> run(const LaunchOptions& options, std::ostream& out) override {
    clock_.advance(0.01);
    seen.push_back(options);
    if (seen.size() > script.size()) return failed_precondition("no attempt scripted");
    out << "[rank 0] a worker's line\n";
    LaunchResult r = script[seen.size() - 1](options);
    clock_.advance(0.01);  // the workers exit
    return r;
  }

 private:
  FakeClock& clock_;
};

inline LaunchResult all_exited() {
  LaunchResult r;
  r.summary = "all workers exited 0";
  return r;
}

inline LaunchResult lost(std::vector<int> ranks, int code) {
  LaunchResult r;
  r.exit_code = code;
  r.failed_rank = ranks.empty() ? -1 : ranks.front();
  r.lost_ranks = std::move(ranks);
  r.stop_s = 1.5;
  r.summary = "rank lost";
  return r;
}

inline std::vector<Json> recoveries(const std::string& out) {
  std::vector<Json> rows;
  std::ifstream in(out + "/elastic/recoveries.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(Json::parse(line));
  return rows;
}

// What a worker launched with `vars` reads.
inline WorkerEnv env_of(const std::map<std::string, std::string>& vars) {
  return WorkerEnv::from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }).value();
}

inline std::string value_after(const std::vector<std::string>& words, const std::string& flag) {
  for (size_t i = 0; i + 1 < words.size(); ++i)
    if (words[i] == flag) return words[i + 1];
  return "";
}

struct Fixture {
  testing::TempDir dir;
  FakeClock clock;
  FakeLauncher launcher{clock};
  RunFolder folder{dir.path(), &clock};
  std::ostringstream out, err;
  ElasticOptions options() const {
    ElasticOptions o;
    o.job_file = dir.file("job.yaml");
    o.out_dir = dir.path();
    o.command = {"harp", "train"};
    return o;
  }
};

}  // namespace harp::launch
