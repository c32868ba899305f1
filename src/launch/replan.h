// Re-planning on drift, the elastic controller's part that judges a running plan
// (elastic.h): the factors the run has measured (compute per subcluster, links between
// subclusters), a plan over them, and whether it pays for its restart. The controller asks
// it for each attempt's plan, starts it on the plan that runs, polls it while the workers
// train, and takes the adopted plan and its record after the stop for it.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "harp/cluster/cluster.h"
#include "harp/common/document.h"
#include "harp/launch/clock.h"
#include "harp/launch/elastic.h"
#include "harp/launch/progress.h"
#include "harp/plan/plan.h"

namespace harp::launch {

inline constexpr const char* kElasticWho = "harp launch --elastic: ";

// Appends `record` to ELASTIC_DIR/recoveries.jsonl (node 0 only).
void append_recovery(const std::string& elastic_dir, int node_rank, const Json& record);

class Replanner {
 public:
  // `out_dir`: the run folder whose metrics.jsonl rank 0 writes.
  Replanner(const ElasticOptions& o, const PlanFn& plan, Clock& clock, std::ostream& err, std::string out_dir);

  // A plan over `cluster` with the factors measured so far.
  StatusOr<PlanAttempt> plan_over(const cluster::Cluster& cluster) const;
  // The plan adopted for the next attempt, once (nullopt: none), and how long its re-plan took.
  std::optional<PlanAttempt> take_next_plan();
  void drop_next_plan() { next_plan_.reset(); }
  double replan_s() const { return replan_s_; }
  // An attempt runs `plan` over `cluster`, made for the factors measured so far.
  void start(const plan::Plan& plan, const cluster::Cluster& cluster);
  // While it runs (LaunchOptions::stop_when): the drifts and link probes rank 0 recorded
  // since it started, each judged once; true stops the workers at their next checkpoint.
  bool watch_drifts(int attempt, double launched_unix);
  bool adopting() const { return adopting_; }  // this attempt stops for the next plan
  // The adopted decision's record, for the controller to complete after the restart.
  Json take_adopted_record();

 private:
  bool judge_drift(int attempt, const DriftRecord& d, const RunProgress& p, double launched_unix);
  bool judge_probe(int attempt, const ProbeRecord& q, const RunProgress& p, double launched_unix);
  bool replan_and_decide(int attempt, Json record, const RunProgress& p, double launched_unix, double old_pred,
                         double measured_old, double before, double model_error);
  int subcluster_index(const std::string& name) const;
  Json links_json() const;
  void append_record(const Json& record);

  const ElasticOptions& o_;
  const PlanFn& plan_;
  Clock& clock_;
  std::ostream& err_;
  const std::string out_dir_, elastic_dir_;
  cluster::Cluster cluster_;               // the running attempt's
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

}  // namespace harp::launch
