// The schedule as part of planning (docs/planner.md, "Schedules"): `harp plan --schedule
// KIND|auto`. The search places stages exactly under harp-1f1b's closed form (its launch
// counts and memory); each searched plan (each candidate of a k/B sweep) is then
// simulated under the candidate schedules, every stage's peak under each (static + what
// its list holds at most: schedule::peak_held_bytes) is checked against its devices'
// usable memory, and the fastest schedule that fits is the plan's. Candidates of a sweep
// are compared by that simulated iteration. The simulator is the judge: zero-bubble
// schedules have no closed form here. A fixed KIND is the same with one candidate: the plan
// is infeasible when it does not fit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harp/common/units.h"
#include "harp/cost/stage_costs.h"
#include "harp/plan/plan.h"

namespace harp::planner {

struct ScheduleOption {
  plan::ScheduleKind kind = plan::ScheduleKind::kHarp1F1B;
  bool fits = false;
  Seconds simulated_s = 0;
  Bytes peak_bytes = 0;  // the largest stage's
  std::string why;       // when it does not fit (or does not drain): which stage, how much
};

// The plans of the search a schedule choice weighs at most (SearchOptions::candidates).
inline constexpr int kScheduleCandidates = 16;

// What --schedule auto weighs: 1f1b, harp-1f1b, zb-h1, zb-h2, harp-zb.
const std::vector<plan::ScheduleKind>& auto_schedule_kinds();

// Every kind of `kinds` on `plan` (the δ-rule kinds on the plan's launch counts), each
// stage's peak against costs.usable_memory_bytes(its subcluster).
std::vector<ScheduleOption> weigh_schedules(const plan::Plan& plan, const cost::StageCosts& costs,
                                            const std::vector<plan::ScheduleKind>& kinds);

// The fastest option that fits (ties: the earlier kind), or nullopt.
std::optional<ScheduleOption> fastest_fitting(const std::vector<ScheduleOption>& options);

// The fastest pair that fits of every plan of `plans` under every kind of `kinds`
// (ties: the earlier plan, then the earlier kind). `plan` = -1 when none fits; `options`
// are the chosen plan's (the first plan's when none fits).
struct PairChoice {
  int plan = -1;
  std::vector<ScheduleOption> options;
  int weighed = 0;  // plans weighed
};
PairChoice fastest_pair(const std::vector<plan::Plan>& plans, const cost::StageCosts& costs,
                        const std::vector<plan::ScheduleKind>& kinds);

// Sets `plan`'s schedule to `option.kind` and its launch counts to the ones it runs.
void adopt_schedule(plan::Plan* plan, const ScheduleOption& option);

// "harp-zb 17.99 s, harp-1f1b 18.15 s, zb-h2 over memory (stage 2: 58.4 of 40 GiB), ...".
std::string describe_options(const std::vector<ScheduleOption>& options);

}  // namespace harp::planner
