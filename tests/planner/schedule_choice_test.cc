// The schedule chosen per plan (planner/schedule_choice.h, `harp plan --schedule`): auto
// keeps the fastest schedule whose every stage fits its devices, checked against an
// independent pass over the same plan (each schedule lowered and simulated here, each
// stage's simulated peak against its device's usable memory); a fixed schedule that does
// not fit makes the plan infeasible; and the memory limit decides where it binds.
#include <gtest/gtest.h>

#include "harp/job/job.h"
#include "harp/planner/plan_job.h"
#include "harp/schedule/lower_plan.h"
#include "harp/sim/simulator.h"

namespace harp::planner {
namespace {

job::Job paper_job(const std::string& name) {
  StatusOr<job::Job> j = job::load_job(std::string(HARP_SOURCE_DIR) + "/examples/jobs/" + name);
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  return std::move(j).value();
}

struct Expected {
  bool any = false;
  plan::ScheduleKind kind = plan::ScheduleKind::kHarp1F1B;
  Seconds simulated_s = 0;
};

// The oracle: every auto kind on the harp-1f1b plan, lowered and simulated here.
Expected fastest_fitting_by_hand(const plan::Plan& plan, const cost::StageCosts& costs) {
  Expected e;
  for (plan::ScheduleKind kind : auto_schedule_kinds()) {
    plan::Plan p = plan;
    if (plan::uses_delta_rule(kind)) p.schedule = kind;  // the search's own launch counts
    auto low = schedule::lower_plan(p, kind);
    if (!low.ok() || !low->check.ok) continue;
    auto sim = sim::simulate(p, low->lowered);
    if (!sim.ok()) continue;
    bool fits = true;
    for (int i = 0; i < p.num_stages(); ++i)
      fits = fits && sim->ranks[i].peak_memory_bytes <= costs.usable_memory_bytes(p.stages[i].subcluster);
    if (fits && (!e.any || sim->iteration_s() < e.simulated_s)) e = {true, kind, sim->iteration_s()};
  }
  return e;
}

Seconds sim_time(const plan::Plan& plan) {
  auto low = schedule::lower_plan(plan);
  EXPECT_TRUE(low.ok() && low->check.ok);
  auto sim = sim::simulate(plan, low->lowered);
  EXPECT_TRUE(sim.ok());
  return sim->iteration_s();
}

TEST(ScheduleChoice, AutoKeepsTheFastestScheduleThatFits) {
  for (const char* name : {"paper_gpt2.6b.yaml", "paper_gpt6.7b.yaml"}) {
    for (double gib : {16.0, 32.0, 80.0}) {
      SCOPED_TRACE(std::string(name) + ", V100s of " + std::to_string(gib) + " GiB");
      job::Job job = paper_job(name);
      for (auto& [name, d] : job.cluster.devices)
        if (name.rfind("V100", 0) == 0) d.memory_gib = gib;
      PlanRequest own;
      own.microbatches = 16;  // fewer, larger microbatches: a larger bubble
      own.recompute = "auto";
      StatusOr<PlanOutcome> base = plan_job(job, own);
      ASSERT_TRUE(base.ok()) << base.status().to_string();
      if (!base->result.feasible) continue;
      PlanRequest automatic = own;
      automatic.schedule = "auto";
      StatusOr<PlanOutcome> got = plan_job(job, automatic);
      ASSERT_TRUE(got.ok());
      const Expected want = fastest_fitting_by_hand(base->result.plan, base->problem.costs);
      ASSERT_TRUE(want.any) << "harp-1f1b's own plan fits";
      ASSERT_TRUE(got->result.feasible) << got->result.reason;
      EXPECT_EQ(got->result.schedules.size(), auto_schedule_kinds().size());
      EXPECT_GE(got->result.plans_weighed, 1);
      // The pair chosen is the searched plan's best, or another searched plan's that is faster.
      EXPECT_LE(got->result.judged_s, want.simulated_s * (1 + 1e-12)) << describe_options(got->result.schedules);
      if (got->result.judged_s == want.simulated_s) {
        EXPECT_EQ(got->result.plan.schedule, want.kind) << describe_options(got->result.schedules);
      } else {
        std::printf("%s, %.0f GiB: another searched plan under %s, %.2f s, beats the closed form's best plan "
                    "under %s, %.2f s\n", name, gib, plan::schedule_kind_name(got->result.plan.schedule),
                    got->result.judged_s, plan::schedule_kind_name(want.kind), want.simulated_s);
      }
      // The chosen pair, run here as chosen: the time it was judged by, every stage fitting.
      const plan::Plan& chosen = got->result.plan;
      auto low = schedule::lower_plan(chosen);
      ASSERT_TRUE(low.ok() && low->check.ok);
      auto sim = sim::simulate(chosen, low->lowered);
      ASSERT_TRUE(sim.ok());
      EXPECT_NEAR(sim->iteration_s(), got->result.judged_s, 1e-9 * want.simulated_s);
      for (int i = 0; i < chosen.num_stages(); ++i)
        EXPECT_LE(sim->ranks[i].peak_memory_bytes, got->problem.costs.usable_memory_bytes(chosen.stages[i].subcluster));
      EXPECT_LE(got->result.judged_s, sim_time(base->result.plan));
    }
  }
}

// GPT-2.6B on the paper's cluster (64 microbatches): the paper's ZB-H2 holds twice 1F1B's
// microbatches on every stage, more than the A100s' 40 GB; harp-zb stays under every
// device. A fixed schedule that does not fit is infeasible, with every stage's shortfall.
TEST(ScheduleChoice, AScheduleThatDoesNotFitIsRefused) {
  const job::Job job = paper_job("paper_gpt2.6b.yaml");
  PlanRequest r;
  r.schedule = "zb-h2";
  StatusOr<PlanOutcome> zb_h2 = plan_job(job, r);
  ASSERT_TRUE(zb_h2.ok());
  EXPECT_FALSE(zb_h2->result.feasible);
  EXPECT_NE(zb_h2->result.reason.find("zb-h2 (stage"), std::string::npos) << zb_h2->result.reason;
  r.schedule = "harp-zb";
  StatusOr<PlanOutcome> harp_zb = plan_job(job, r);
  ASSERT_TRUE(harp_zb.ok() && harp_zb->result.feasible) << harp_zb->result.reason;
  EXPECT_EQ(harp_zb->result.plan.schedule, plan::ScheduleKind::kHarpZb);
  // The job's schedule.kind is the default; the request's schedule overrides it.
  job::Job with_kind = job;
  with_kind.schedule = "harp-zb";
  r.schedule.reset();
  StatusOr<PlanOutcome> from_job = plan_job(with_kind, r);
  ASSERT_TRUE(from_job.ok() && from_job->result.feasible);
  EXPECT_EQ(from_job->result.plan.schedule, plan::ScheduleKind::kHarpZb);
  r.schedule = "zb-h2";
  StatusOr<PlanOutcome> overridden = plan_job(with_kind, r);
  ASSERT_TRUE(overridden.ok());
  EXPECT_FALSE(overridden->result.feasible) << "zb-h2, not the job's harp-zb";
  r.schedule.reset();
  StatusOr<PlanOutcome> own = plan_job(job, r);
  ASSERT_TRUE(own.ok() && own->result.feasible);
  EXPECT_EQ(own->result.plan.schedule, plan::ScheduleKind::kHarp1F1B) << "unchanged without --schedule";
  EXPECT_TRUE(own->result.schedules.empty());
  EXPECT_LE(harp_zb->result.judged_s, sim_time(own->result.plan));
}

// GPT-6.7B on the paper's cluster (128 microbatches): the fastest pair is harp-zb on a plan
// whose stages hold as much as their devices allow, so that HARP's δ rule's extra
// microbatches do not fit; harp-zb hides the links with Ws instead, within every device.
TEST(ScheduleChoice, ASplitScheduleWinsOnAPlanHarpsCountsCannotFit) {
  const job::Job job = paper_job("paper_gpt6.7b.yaml");
  PlanRequest r;
  StatusOr<PlanOutcome> own = plan_job(job, r);
  ASSERT_TRUE(own.ok() && own->result.feasible);
  r.schedule = "auto";
  StatusOr<PlanOutcome> got = plan_job(job, r);
  ASSERT_TRUE(got.ok() && got->result.feasible) << got->result.reason;
  const plan::Plan& chosen = got->result.plan;
  EXPECT_EQ(chosen.schedule, plan::ScheduleKind::kHarpZb) << describe_options(got->result.schedules);
  EXPECT_GT(got->result.plans_weighed, 1);
  const Seconds harp = sim_time(own->result.plan);
  // 64.1 s against 65.1 s since the V100s are priced at 30% of their fp16 peak (Megatron-LM
  // 2019) rather than 50%: the V100 pool is the bottleneck either way; before, 45.1 s
  // against 50.6 s.
  EXPECT_LT(got->result.judged_s, harp) << "measured 64.1 s against 65.1 s";
  // The same placements under HARP's own counts (the δ rule at their period) do not fit.
  BuildOptions b;
  b.microbatches = chosen.microbatches;
  b.schedule = plan::ScheduleKind::kHarp1F1B;
  std::vector<Placement> placements;
  const cluster::Cluster& cluster = got->problem.costs.cluster();
  for (const plan::Stage& st : chosen.stages) {
    Placement p;
    p.subcluster = st.subcluster;
    const auto& sc = cluster.subclusters[st.subcluster];
    const int local = st.devices.front() - cluster.first_device_id(st.subcluster);
    p.first_node = local / sc.devices_per_node;
    p.first_local = local % sc.devices_per_node;
    p.devices = static_cast<int>(st.devices.size());
    p.dp = st.dp;
    p.tp = st.tp;
    p.first_layer = st.first_layer;
    p.last_layer = st.last_layer;
    p.recompute = st.recompute;
    p.zero = st.zero;
    placements.push_back(p);
  }
  const plan::Plan with_delta = build_plan(got->problem.costs, placements, b);
  EXPECT_FALSE(check_memory(got->problem.costs, with_delta).ok());
  // Run as chosen: the time it was judged by, every stage within its devices.
  auto low = schedule::lower_plan(chosen);
  ASSERT_TRUE(low.ok() && low->check.ok);
  auto sim = sim::simulate(chosen, low->lowered);
  ASSERT_TRUE(sim.ok());
  EXPECT_NEAR(sim->iteration_s(), got->result.judged_s, 1e-9 * harp);
  for (int i = 0; i < chosen.num_stages(); ++i)
    EXPECT_LE(sim->ranks[i].peak_memory_bytes, got->problem.costs.usable_memory_bytes(chosen.stages[i].subcluster));
}

}  // namespace
}  // namespace harp::planner
