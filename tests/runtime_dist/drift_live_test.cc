// Drift detection in a run (runtime/io/drift.h): two stages as thread ranks; stage 1's
// compute is made 5x slower from step 10 on (the executor's extra slowdown, as an
// emulated device is slowed): the run names stage 1 within the window, in its summary
// and metrics.jsonl, on every rank alike; the same run without the slowdown reports
// nothing over 30 steps. Over the in-memory transport, whose messages take a chosen transit:
// each step's measured transit of the link equals it, and the link made 10x slower mid-run
// is named as the drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "harp/common/document.h"
#include "rank_threads.h"
#include "testutil/tiny_gpt.h"

namespace harp::runtime {
namespace {

const std::string kRoot = std::string(HARP_BINARY_DIR) + "/drift_live_test";

plan::Plan inside_one_node(plan::Plan p) {
  for (plan::Stage& s : p.stages) s.crosses_nodes = false;
  return p;
}

// Two stages of a small GPT, one microbatch stage each; enough compute per microbatch
// (milliseconds) that scheduling noise is small beside it.
struct TwoStages {
  model::ModelSpec m = testing::tiny_gpt(1, true, /*blocks=*/2, /*hidden=*/96, /*heads=*/4, /*seq=*/64, 64);
  // Thread ranks of one process share a node: their link is not judged (a link between
  // nodes is, run_link).
  plan::Plan p = inside_one_node(testing::make_plan(m, {2}, {1, 1}, 4, 2, plan::ScheduleKind::k1F1B));
  std::unique_ptr<TokenSource> data = synthetic_tokens(3, 1 << 16, m.gpt.vocab);

  // Options of a run of `steps` steps into kRoot/name (emptied), drift detection at 2.5x
  // over windows of 5.
  static TrainOptions options(const std::string& name, int steps) {
    torch::set_num_threads(1);
    TrainOptions o;
    o.progress = false;
    o.steps = steps;
    o.out_dir = kRoot + "/" + name;
    o.drift = {2.5, 5};
    std::filesystem::remove_all(o.out_dir);
    return o;
  }
};

TrainSummary run(const std::string& name, bool slow) {
  TwoStages t;
  TrainOptions o = TwoStages::options(name, 30);
  if (slow) o.fake_slowdown = [](int step, int stage) { return stage == 1 && step >= 10 ? 5.0 : 1.0; };
  return testing::train_threads(t.m, t.p, *t.data, o);
}

// The testbed's device slowdown file (harp testbed set --device-slowdown): written "5"
// before step 10 (by the step hook), read by the ranks before each step; the run's
// drift detection sees the pipeline's bound move 5x.
TEST(DriftLive, TheTestbedSlowdownFileSlowsTheRanks) {
  TwoStages t;
  TrainOptions o = TwoStages::options("file", 24);
  o.slowdown_file = kRoot + "/slowdown";
  std::filesystem::create_directories(kRoot);
  std::filesystem::remove(o.slowdown_file);
  const std::string file = o.slowdown_file;
  o.fake_slowdown = [file](int step, int stage) {
    if (step == 10 && stage == 0) std::ofstream(file) << "5\n";
    return 1.0;
  };
  const TrainSummary s = testing::train_threads(t.m, t.p, *t.data, o);
  ASSERT_EQ(s.drifts.size(), 1u);
  EXPECT_GE(s.drifts[0].step, 10);
  EXPECT_LE(s.drifts[0].step, 10 + 5);
  EXPECT_GT(s.drifts[0].ratio, 2.5);
}

TEST(DriftLive, ASlowedStageIsNamedAndAnUnchangedRunReportsNothing) {
  const TrainSummary slowed = run("slowed", true);
  ASSERT_EQ(slowed.drifts.size(), 1u);
  EXPECT_EQ(slowed.drifts[0].stage, 1);
  EXPECT_GE(slowed.drifts[0].step, 10);
  EXPECT_LE(slowed.drifts[0].step, 10 + 5);
  EXPECT_GT(slowed.drifts[0].ratio, 2.5);
  int records = 0;
  std::ifstream in(kRoot + "/slowed/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (Json::parse(line).contains("drift_after_steps")) ++records;
  EXPECT_EQ(records, 1);
  EXPECT_TRUE(run("unchanged", false).drifts.empty());
}

// Two stages over the in-memory transport; every message between them takes `transit(step)`.
TrainSummary run_link(const std::string& name, const std::function<double(int)>& transit, int steps) {
  TwoStages t;
  t.p.stages[0].crosses_nodes = true;  // a link between nodes: judged
  MemNetwork net(2);
  net.set_transit([transit](int, int, int step) { return transit(step); });
  return testing::train_in_memory(t.m, t.p, *t.data, TwoStages::options(name, steps), net);
}

// The per-step figure metrics.jsonl records for the link.
std::vector<double> link_s_of(const std::string& name) {
  std::vector<double> out;
  std::ifstream in(kRoot + "/" + name + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json r = Json::parse(line);
    if (r.contains("step") && r.contains("link_s")) out.push_back(r["link_s"][0].get<double>());
  }
  return out;
}

TEST(DriftLive, ALinkMadeTenTimesSlowerIsMeasuredAndNamed) {
  const TrainSummary s = run_link("link", [](int step) { return step >= 10 ? 0.030 : 0.003; }, 24);
  // The measured transit is the injected one, before and after (the two ends' clocks are
  // one here, so it is exact but for the receiver's wake-up). No step measures less than
  // the transit; the median of each phase is within 1.5 ms + 10% of it. A busy machine
  // wakes the receiver late (one step at +2 ms with five other processes on the two cores;
  // the phase's median +2.0 ms with the suite and two `yes` beside it), so no step is
  // bounded from above alone.
  const std::vector<double> link_s = link_s_of("link");
  ASSERT_EQ(link_s.size(), 24u);
  std::vector<double> before, after;
  for (int step = 1; step < 24; ++step) {
    if (step == 10) continue;  // the step of the change
    const double injected = step > 10 ? 0.030 : 0.003;
    EXPECT_GT(link_s[step], injected - 0.0005) << "step " << step;
    (step > 10 ? after : before).push_back(link_s[step]);
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  EXPECT_NEAR(median(before), 0.003, 0.0015 + 0.0003);
  EXPECT_NEAR(median(after), 0.030, 0.0015 + 0.003);
  ASSERT_EQ(s.drifts.size(), 1u);
  EXPECT_EQ(s.drifts[0].link, 0);
  EXPECT_EQ(s.drifts[0].stage, -1);
  EXPECT_GE(s.drifts[0].step, 10);
  EXPECT_LE(s.drifts[0].step, 10 + 5);
  EXPECT_NEAR(s.drifts[0].ratio, 10.0, 1.5);
  ASSERT_EQ(s.drifts[0].link_measured_s.size(), 1u);
  EXPECT_GT(s.drifts[0].link_measured_s[0], 0.030 - 0.0005);
  EXPECT_NEAR(s.drifts[0].link_measured_s[0], 0.030, 0.0015 + 0.003);
}

TEST(DriftLive, ASteadySlowLinkReportsNothing) {
  EXPECT_TRUE(run_link("steady_link", [](int) { return 0.010; }, 30).drifts.empty());
}

// Link probes (TrainOptions::link_probe_every): three stages on subclusters a, b, c over the
// in-memory transport, where a message between the first and the last stage's ranks takes
// 20 ms and every other none. No two consecutive stages join a and c, so every 4th step
// their first ranks exchange a cut-sized message there and back: metrics.jsonl has the
// transit, half the round trip, on those steps only; probing changes no loss.
TEST(DriftLive, ALinkNoTwoStagesJoinIsProbedEveryKSteps) {
  TwoStages t;
  plan::Plan p = testing::make_plan(t.m, {1, 3}, {1, 1, 1}, 4, 2, plan::ScheduleKind::k1F1B);
  const char* names[] = {"a", "b", "c"};
  for (int s = 0; s < 3; ++s) p.stages[s].subcluster_name = names[s];
  auto run = [&](const std::string& name, int every) {
    MemNetwork net(3);
    net.set_transit([](int from, int to, int) { return from + to == 2 && from != to ? 0.020 : 0.0; });
    TrainOptions o = TwoStages::options(name, 8);
    o.link_probe_every = every;
    return testing::train_in_memory(t.m, p, *t.data, o, net);
  };
  const TrainSummary probed = run("probed", 4), plain = run("plain", 0);
  EXPECT_EQ(probed.losses, plain.losses);
  std::ifstream in(kRoot + "/probed/metrics.jsonl");
  std::vector<int> probe_steps;
  for (std::string line; std::getline(in, line);) {
    const Json r = Json::parse(line);
    if (!r.contains("step") || !r.contains("link_probes")) continue;
    probe_steps.push_back(r["step"].get<int>());
    ASSERT_EQ(r["link_probes"].size(), 1u);
    const Json& q = r["link_probes"][0];
    EXPECT_EQ(q["a"], "a");
    EXPECT_EQ(q["b"], "c");
    EXPECT_GT(q["bytes"].get<double>(), 0);
    // Nothing arrives before its transit; a loaded machine's thread wake-ups add to it
    // (up to 3.6 ms measured under ctest -j2 beside other tests).
    EXPECT_GE(q["transit_s"].get<double>(), 0.019);
    EXPECT_LE(q["transit_s"].get<double>(), 0.030);
  }
  EXPECT_EQ(probe_steps, (std::vector<int>{3, 7}));
}

}  // namespace
}  // namespace harp::runtime
