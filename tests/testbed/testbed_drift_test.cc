// Drift on the testbed for real: a link slowed mid-run is measured and named by the run,
// an unchanged testbed reports no drift, and a launcher that re-plans routes around the
// slowed link at the next checkpoint, its losses a fresh run's from there.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "../runtime_dist/process_util.h"
#include "harp/common/document.h"
#include "harp/plan/plan_io.h"
#include "testbed_live_util.h"

namespace harp::testbed {
namespace {

// The link slowed 4x (harp testbed set) while a run trains over it: the run's measured
// transit moves from the old link model's time to the new one's, and its drift detection
// names the link (not a stage) at about 4x.
TEST(TestbedLive, ALinkSlowedMidRunIsMeasuredAndNamedByTheRun) {
  SKIP_WITHOUT_TESTBED();
  testing::TempDir dir;
  const std::string prefix = unique_prefix("d");
  prepare_pair_run(dir, "training: {steps: 24, lr: 1.0e-3, threads: 1, drift_threshold: 1.5, drift_window: 4}");
  if (::testing::Test::HasFatalFailure()) return;
  std::string out;
  int rc = -1;
  std::thread run([&] { rc = launch_pair_run(dir, prefix, &out); });
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (link_s_per_step(dir).size() < 10 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const size_t set_after = link_s_per_step(dir).size();
  std::string set_out;
  const int set_rc = shell(kHarp + " testbed set --cluster " + dir.file("cluster.yaml") + " --prefix " + prefix +
                               " --link left-right --bandwidth-gbps 0.025",
                           &set_out);
  run.join();
  ASSERT_EQ(set_rc, 0) << set_out;
  ASSERT_EQ(rc, 0) << out;
  expect_nothing_left(prefix);
  const double bytes = 2.0 * 128 * 128 * 4;
  const double before_s = 50e-6 + bytes * 8 / 0.1e9, after_s = 50e-6 + bytes * 8 / 0.025e9;  // 10.5, 42 ms
  const std::vector<double> link_s = link_s_per_step(dir);
  ASSERT_EQ(link_s.size(), 24u);
  std::string ms;
  for (double x : link_s) ms += (ms.empty() ? "" : " ") + std::to_string(x * 1e3).substr(0, 5);
  std::printf("the run's measured transit per step (ms): %s; the set after step %zu; model %.1f, then %.1f ms\n",
              ms.c_str(), set_after, before_s * 1e3, after_s * 1e3);
  for (size_t s = 1; s < set_after - 1; ++s) {
    EXPECT_GT(link_s[s], 0.85 * before_s) << "step " << s + 1;
    EXPECT_LT(link_s[s], 1.3 * before_s) << "step " << s + 1;
  }
  for (size_t s = set_after + 2; s < link_s.size(); ++s) {
    EXPECT_GT(link_s[s], 0.85 * after_s) << "step " << s + 1;
    EXPECT_LT(link_s[s], 1.3 * after_s) << "step " << s + 1;
  }
  std::vector<Json> drifts;
  std::ifstream in(dir.file("run/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const Json r = Json::parse(line, nullptr, false);
    if (r.is_object() && r.contains("drift_after_steps")) drifts.push_back(r);
  }
  ASSERT_EQ(drifts.size(), 1u) << out;
  EXPECT_EQ(drifts[0]["link"], 0);
  EXPECT_EQ(drifts[0]["stage"], -1);
  EXPECT_GT(drifts[0]["ratio"].get<double>(), 3.0);
  EXPECT_LT(drifts[0]["ratio"].get<double>(), 5.0);
  EXPECT_LE(drifts[0]["drift_after_steps"].get<int>(), static_cast<int>(set_after) + 1 + 4);
}

// No flapping: 50 steps over the unchanged shaped link (the pipeline bound by it, its
// stages' compute swinging with the machine's load) report no drift, so an elastic run
// would re-plan nothing.
TEST(TestbedLive, AnUnchangedTestbedReportsNoDriftIn50Steps) {
  SKIP_WITHOUT_TESTBED();
  testing::TempDir dir;
  const std::string prefix = unique_prefix("n");
  prepare_pair_run(dir, "training: {steps: 50, lr: 1.0e-3, threads: 1, drift_threshold: 1.5, drift_window: 5}");
  if (::testing::Test::HasFatalFailure()) return;
  std::string out;
  ASSERT_EQ(launch_pair_run(dir, prefix, &out), 0) << out;
  expect_nothing_left(prefix);
  ASSERT_EQ(link_s_per_step(dir).size(), 50u);
  std::ifstream in(dir.file("run/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) EXPECT_EQ(line.find("drift_after_steps"), std::string::npos) << line;
}

// Re-planning around a slowed link, end to end on the testbed: three one-CPU pools joined
// pairwise at 0.1 Gbit/s (the subcluster order searched), the pair run's model (a 128 KiB
// activation: 10.5 ms a message, above its stages' compute); after 8 steps `harp testbed
// set` takes the first plan's first link to 0.025 Gbit/s (4x). The run measures it and
// names the link, the launcher calibrates that link, re-plans around it and adopts the new
// order at the next checkpoint; the run finishes, no step is lost, the new plan crosses
// only the unchanged links and is measured faster, and the losses after the switch are a
// fresh run's from that checkpoint on the new plan.
TEST(TestbedLive, ALinkSlowedMidRunIsRoutedAroundAtTheNextCheckpoint) {
  SKIP_WITHOUT_TESTBED();
  testing::TempDir dir;
  const std::string prefix = unique_prefix("e");
  const int every = 4, steps = 40;
  std::ofstream(dir.file("cluster.yaml")) << R"(version: 1
name: mesh-three
subclusters:
  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}
  - {name: b, device: cpu, nodes: 1, devices_per_node: 1}
  - {name: c, device: cpu, nodes: 1, devices_per_node: 1}
links:
  - {between: [a, b], bandwidth_gbps: 0.1, latency_ms: 0.05}
  - {between: [b, c], bandwidth_gbps: 0.1, latency_ms: 0.05}
  - {between: [a, c], bandwidth_gbps: 0.1, latency_ms: 0.05}
)";
  std::ofstream(dir.file("job.yaml")) << R"(version: 1
cluster: cluster.yaml
model: {family: gpt, name: gpt-shaped, num_blocks: 2, hidden: 128, heads: 4, seq_len: 128, vocab: 256, granularity: 1}
planner: {strategy: harp, microbatches: 12, microbatch_size: 2, fixed_order: false}
training: {steps: 40, lr: 1.0e-3, warmup_steps: 2, threads: 1, out: run, checkpoint_every: 4,
           drift_threshold: 1.5, drift_window: 5, replan_min_gain: 0.05}
)";
  {
    std::ofstream text(dir.file("corpus.txt"));
    for (int i = 0; i < 4000; ++i) text << "line " << i << " of a corpus for the shaped link test\n";
  }
  std::string out;
  ASSERT_EQ(shell(kHarp + " data prepare --input " + dir.file("corpus.txt") + " --output " + dir.file("corpus.bin"), &out),
            0)
      << out;
  const std::string run_dir = dir.file("run");
  int rc = -1;
  std::thread launcher([&] {
    rc = shell("cd " + dir.path() + " && OMP_NUM_THREADS=1 timeout 170 " + kHarp + " launch --elastic --job job.yaml" +
                   " --testbed cluster.yaml --testbed-prefix " + prefix + " -- " + kHarp + " train --data corpus.bin",
               &out);
  });
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (link_s_per_step(dir).size() < 8 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto plan0 = plan::load_plan(run_dir + "/elastic/plan_0.json");
  std::string slowed, set_out;
  int set_rc = -1;
  if (plan0.ok() && plan0->num_stages() >= 2) {
    slowed = plan0->stages[0].subcluster_name + "-" + plan0->stages[1].subcluster_name;
    set_rc = shell(kHarp + " testbed set --cluster " + dir.file("cluster.yaml") + " --prefix " + prefix + " --link " +
                       slowed + " --bandwidth-gbps 0.025",
                   &set_out);
  }
  launcher.join();
  ASSERT_TRUE(plan0.ok()) << out;
  ASSERT_EQ(plan0->num_stages(), 3) << "the test needs a plan across the three pools";
  ASSERT_EQ(set_rc, 0) << set_out;
  ASSERT_EQ(rc, 0) << out;
  expect_nothing_left(prefix);
  auto rec = read_text_file(run_dir + "/elastic/recoveries.jsonl");
  ASSERT_TRUE(rec.ok()) << out;
  Json r = Json::object();  // the adopted decision
  for (size_t at = 0; at < rec->size();) {
    const size_t end = rec->find('\n', at);
    const Json line = Json::parse(rec->substr(at, end - at));
    if (line.value("adopted", false) && !r.contains("stopped_at_step")) r = line;
    at = end == std::string::npos ? rec->size() : end + 1;
  }
  ASSERT_TRUE(r.contains("stopped_at_step")) << "no plan adopted\n" << *rec << out;
  EXPECT_EQ(r["link"], 0) << *rec;
  const std::string key = plan0->stages[0].subcluster_name < plan0->stages[1].subcluster_name
                              ? plan0->stages[0].subcluster_name + "-" + plan0->stages[1].subcluster_name
                              : plan0->stages[1].subcluster_name + "-" + plan0->stages[0].subcluster_name;
  EXPECT_GT(r["link_drift"][key].get<double>(), 3.0) << *rec;
  EXPECT_LT(r["link_drift"][key].get<double>(), 5.0) << *rec;
  const int stopped = r["stopped_at_step"].get<int>(), adopted = r["attempt"].get<int>();
  EXPECT_EQ(stopped % every, 0);
  EXPECT_EQ(r["steps_lost"], 0);
  EXPECT_LT(r["measured_new_s"].get<double>(), 0.6 * r["measured_old_s"].get<double>()) << *rec;
  auto plan1 = plan::load_plan(run_dir + "/elastic/plan_" + std::to_string(adopted) + ".json");
  ASSERT_TRUE(plan1.ok());
  for (int s = 0; s + 1 < plan1->num_stages(); ++s) {
    const std::string a = plan1->stages[s].subcluster_name, b = plan1->stages[s + 1].subcluster_name;
    EXPECT_NE((a < b ? a + "-" + b : b + "-" + a), key) << "the new plan still crosses the slowed link";
  }
  std::printf("slowed %s after step 8: detected after step %d (%.2fx), the new plan adopted at step %d: "
              "%.0f ms per step against %.0f ms (estimated %.0f ms), restart %.1f s\n",
              slowed.c_str(), r["drift_after_steps"].get<int>(), r["ratio"].get<double>(), stopped,
              1e3 * r["measured_new_s"].get<double>(), 1e3 * r["measured_old_s"].get<double>(),
              1e3 * r["estimated_new_s"].get<double>(), r["restart_s"].get<double>());
  expect_continues_as_a_fresh_run(kHarp, dir.path(), stopped, 3, steps, limit, adopted,
                                  {"--data", dir.file("corpus.bin")});
}

}  // namespace
}  // namespace harp::testbed
