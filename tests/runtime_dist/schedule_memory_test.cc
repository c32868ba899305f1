// What each schedule keeps in flight, measured: a three-stage plan (three single-device
// pools) trained by `harp launch` (one rank per process, so the counting allocator sees one
// rank) under 1f1b, zb-h1, zb-h2 and harp-zb; every stage's measured peak against the
// memory model (static + what its list holds at most: forwards awaiting their B or I x
// activation_bytes, Is awaiting their W x weight_grad_bytes; schedule::peak_held_bytes;
// the backward's working set) within 10% (float32), and what each split schedule keeps
// beyond 1F1B against the model's difference. Measured: peaks 0.7% to 5.3% above the
// model under every schedule (7% to 15% before the model counted the stage's output
// held until its backward and the backward's temporaries, and before the runtime
// released a forward send once its gradient came back instead of at the step's end);
// under tensor parallelism (tp 2) -1.1% and +3.5% (the replicated norm inputs counted).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

#include "harp/common/document.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

int sh(const std::string& command) { return std::system((command + " > /dev/null 2>&1").c_str()); }

// A float32 job of a GPT (`model`: the fields after family) on `cluster` (YAML), planned
// into DIR/plan.json; returns the job file's path.
std::string plan_job(const TempDir& dir, const std::string& cluster, const std::string& model,
                     const std::string& planner) {
  std::ofstream(dir.file("cluster.yaml")) << cluster;
  const std::string job = dir.file("job.yaml");
  std::ofstream(job) << "version: 1\ncluster: cluster.yaml\nmodel: {family: gpt, name: gpt-mem, " << model
                     << ", vocab: 256, granularity: 1}\nplanner: {strategy: harp, " << planner
                     << "}\ntraining: {steps: 3, lr: 1.0e-3, warmup_steps: 1, dtype: float32}\n"
                        "cost: {workspace_bytes: 0}\n";
  EXPECT_EQ(sh(kHarp + " plan --job " + job + " --output " + dir.file("plan.json")), 0);
  return job;
}

// `harp launch` of DIR/plan.json on `nproc` processes under `schedule`; its summary.json.
StatusOr<Json> train(const TempDir& dir, const std::string& job, int nproc, const std::string& schedule) {
  const std::string out = dir.file("run_" + schedule);
  const int rc =
      sh("timeout 180 " + kHarp + " launch --nproc " + std::to_string(nproc) + " -- " + kHarp + " train --plan " +
         dir.file("plan.json") + " --job " + job + " --schedule " + schedule + " --out " + out + " --quiet");
  if (rc != 0) return failed_precondition("harp launch exited " + std::to_string(rc));
  return load_document(out + "/summary.json");
}

TEST(ScheduleMemory, MeasuredPeaksMatchTheModelUnderEverySchedule) {
  TempDir dir;
  const std::string job =
      plan_job(dir, R"(version: 1
name: three-pools
devices: []
subclusters:
  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}
  - {name: b, device: cpu, nodes: 1, devices_per_node: 1}
  - {name: c, device: cpu, nodes: 1, devices_per_node: 1}
links: [{between: [a, b], bandwidth_gbps: 12, latency_ms: 0.08}, {between: [b, c], bandwidth_gbps: 12, latency_ms: 0.08},
        {between: [a, c], bandwidth_gbps: 12, latency_ms: 0.08}]
)",
               "num_blocks: 6, hidden: 256, heads: 4, seq_len: 64", "microbatches: 8, microbatch_size: 4, max_tp: 1");
  std::map<std::string, Json> runs;
  for (const std::string kind : {"1f1b", "zb-h1", "zb-h2", "harp-zb"}) {
    SCOPED_TRACE(kind);
    auto summary = train(dir, job, 3, kind);
    ASSERT_TRUE(summary.ok()) << summary.status().to_string();
    ASSERT_EQ((*summary)["memory"].size(), 3u);
    for (const auto& m : (*summary)["memory"]) {
      const double predicted = m["predicted_bytes"].get<double>(), measured = m["measured_peak_bytes"].get<double>();
      EXPECT_GT(m["predicted_weight_grad_bytes"].get<double>(), 0);
      EXPECT_LE(std::abs(predicted / measured - 1), 0.10)
          << "stage " << m["stage"] << ": predicted " << predicted << " B, measured peak " << measured << " B";
    }
    runs[kind] = *summary;
  }
  // What a split schedule keeps beyond 1F1B (the later stages hold the first stage's
  // count, ZB-H2 twice it): measured against the model's difference, within 15% where the
  // model adds at least 4 MB. Measured here: +9% to +12% (zb-h1 stages 1, 2), +1.5% to
  // +10% (zb-h2).
  for (const std::string kind : {"zb-h1", "zb-h2"}) {
    for (int stage = 0; stage < 3; ++stage) {
      const auto& got = runs[kind]["memory"][stage];
      const auto& base = runs["1f1b"]["memory"][stage];
      const double predicted = got["predicted_bytes"].get<double>() - base["predicted_bytes"].get<double>();
      const double measured = got["measured_peak_bytes"].get<double>() - base["measured_peak_bytes"].get<double>();
      if (predicted < 4e6) continue;
      EXPECT_LE(std::abs(measured / predicted - 1), 0.15)
          << kind << " stage " << stage << ": +" << predicted << " B predicted over 1f1b, +" << measured << " B measured";
    }
    EXPECT_GT(runs[kind]["memory"][2]["predicted_bytes"].get<double>(),
              runs["1f1b"]["memory"][2]["predicted_bytes"].get<double>() + 4e6)
        << "the last stage holds more under " << kind;
  }
}

// Tensor parallelism: two stages of tp 2 (one sample a microbatch: no data parallelism to
// pick instead). Every tp rank keeps the h-wide norm inputs and the projections' inputs
// whole. Measured: -1.1% and +3.5%. Before, the model divided every activation by tp and
// counted neither the held output nor the backward's working set: its figures for these
// stages, 24.3 and 18.9 MB against 28.9 and 21.1 MB measured (-16%, -10%).
TEST(ScheduleMemory, TensorParallelStagesMatchTheModel) {
  TempDir dir;
  const std::string job =
      plan_job(dir, R"(version: 1
name: two-pairs
devices: []
subclusters:
  - {name: a, device: cpu, nodes: 1, devices_per_node: 2, intra_node: {bandwidth_gbps: 12, latency_us: 80}}
  - {name: b, device: cpu, nodes: 1, devices_per_node: 2, intra_node: {bandwidth_gbps: 12, latency_us: 80}}
links: [{between: [a, b], bandwidth_gbps: 12, latency_ms: 0.08}]
)",
               "num_blocks: 4, hidden: 256, heads: 4, seq_len: 256", "microbatches: 2, microbatch_size: 1, max_tp: 2");
  auto planned = load_document(dir.file("plan.json"));
  ASSERT_TRUE(planned.ok()) << planned.status().to_string();
  for (const auto& st : (*planned)["stages"]) ASSERT_EQ(st["tp"].get<int>(), 2) << planned->dump();
  auto summary = train(dir, job, 4, "1f1b");
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  ASSERT_EQ((*summary)["memory"].size(), 2u);
  for (const auto& m : (*summary)["memory"]) {
    const double predicted = m["predicted_bytes"].get<double>(), measured = m["measured_peak_bytes"].get<double>();
    EXPECT_LE(std::abs(predicted / measured - 1), 0.10)
        << "stage " << m["stage"] << ": predicted " << predicted << " B, measured peak " << measured << " B";
  }
}

}  // namespace
}  // namespace harp::testing
