// Sharded optimizer state, measured: `harp plan --zero 0|1|2` on three CPU devices and
// the plan trained by `harp launch` (one rank per process, so the counting allocator sees
// one rank): under ZeRO every stage's measured peak against the plan's figure within 15%
// (float32), and between steps the state as planned (float32 and bf16), ZeRO-1's saving
// equal to the model's (Adam's moments of the stage's sharded parameters, (dp - 1)/dp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "harp/common/document.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

int sh(const std::string& command) { return std::system((command + " > /dev/null 2>&1").c_str()); }

// `harp plan --zero Z` on three CPU devices and `harp launch` of the plan (training dtype
// `dtype`); returns summary.json, and fails the test when the plan has no replicated
// stage at that level.
Json plan_and_train(const TempDir& dir, int zero, const std::string& dtype) {
  const std::string job = dir.file("job_" + dtype + ".yaml");
  // One microbatch: the planner replicates the tail rather than pipelining it.
  std::ofstream(job) << "version: 1\ncluster: cluster.yaml\n"
                        "model: {family: gpt, name: gpt-zero, num_blocks: 4, hidden: 256, heads: 4, seq_len: 64, "
                        "vocab: 256, granularity: 1}\n"
                        "planner: {strategy: harp, microbatches: 1, microbatch_size: 6, max_tp: 1}\n"
                        "training: {steps: 5, lr: 1.0e-2, warmup_steps: 2, dtype: " << dtype << "}\n"
                        "cost: {workspace_bytes: 0}\n";
  const std::string tag = dtype + std::to_string(zero);
  const std::string plan = dir.file("plan_" + tag + ".json"), out = dir.file("run_" + tag);
  EXPECT_EQ(sh(kHarp + " plan --job " + job + " --zero " + std::to_string(zero) + " --output " + plan), 0);
  EXPECT_EQ(sh("timeout 120 " + kHarp + " launch --nproc 3 -- " + kHarp + " train --plan " + plan + " --job " + job +
               " --out " + out + " --quiet"),
            0);
  auto planned = load_document(plan);
  auto summary = load_document(out + "/summary.json");
  if (!planned.ok() || !summary.ok()) {
    ADD_FAILURE() << "no plan or no summary for " << tag;
    return Json::object();
  }
  int sharded = 0;
  for (const auto& st : (*planned)["stages"]) sharded += st.value("zero", 0) == zero && st["dp"].get<int>() > 1;
  EXPECT_GE(sharded, 1) << "the plan has a replicated stage with ZeRO-" << zero << ": " << planned->dump();
  return *summary;
}

void write_cluster(const TempDir& dir) {
  std::ofstream(dir.file("cluster.yaml")) << R"(version: 1
name: three
devices: []
subclusters:
  - {name: pool, device: cpu, nodes: 1, devices_per_node: 3, intra_node: {bandwidth_gbps: 12, latency_us: 80}}
)";
}

// Between steps (parameters, gradients, optimizer state: summary.json's smallest base,
// measured_state_bytes): the plan's static figure, and ZeRO-1 keeps 1/dp of the moments of
// the sharded parameters. Measured to 2 KB.
void expect_state_as_planned(const Json& none, const Json& one) {
  ASSERT_EQ(none["memory"].size(), one["memory"].size());
  for (size_t s = 0; s < none["memory"].size(); ++s) {
    const double tolerance = 0.01 * none["memory"][s]["predicted_static_bytes"].get<double>();
    // The static figure less what a backward holds for a moment (not there between steps).
    auto state = [](const Json& m) {
      return m["predicted_static_bytes"].get<double>() - m["predicted_working_bytes"].get<double>();
    };
    for (const Json* m : {&none["memory"][s], &one["memory"][s]})
      EXPECT_NEAR((*m)["measured_state_bytes"].get<double>(), state(*m), tolerance) << "stage " << s;
    const double predicted = state(none["memory"][s]) - state(one["memory"][s]);
    const double measured = none["memory"][s]["measured_state_bytes"].get<double>() -
                            one["memory"][s]["measured_state_bytes"].get<double>();
    EXPECT_NEAR(measured, predicted, tolerance) << "stage " << s;
  }
}

TEST(ZeroMemory, MeasuredPeaksMatchThePlansFigures) {
  TempDir dir;
  write_cluster(dir);
  std::vector<Json> summaries;
  for (int zero = 0; zero <= 2; ++zero) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const Json summary = plan_and_train(dir, zero, "float32");
    ASSERT_TRUE(summary.contains("memory"));
    // Within 10% (measured: -0.3% to +3.7%). Without ZeRO the data-parallel all-reduce
    // copies the stage's gradients into one flat buffer at the step's end, which the
    // figure leaves out: the dp-2 stage's peak varies between runs (19.1 to 21.1 MB
    // against 19.7 MB predicted). ZeRO-2 frees the gradients between steps; the figure
    // keeps them beside the activations in flight, as a pipeline does from its first
    // backward on, but with one microbatch a step the only backward creates them as it
    // frees its activations: the figure is then an upper bound (measured 13.1 to 13.4 MB
    // against 16.5 MB on the dp-2 stage, 19% to 21% below it).
    for (const auto& m : summary["memory"]) {
      const double predicted = m["predicted_bytes"].get<double>(), measured = m["measured_peak_bytes"].get<double>();
      const bool bound = zero == 2 && m["stage"].get<int>() == 1;
      if (bound) {
        EXPECT_GE(predicted, measured) << "stage " << m["stage"];
      }
      EXPECT_LE(std::abs(predicted / measured - 1), bound ? 0.30 : 0.10)
          << "stage " << m["stage"] << ": predicted " << predicted << " B, measured peak " << measured << " B";
    }
    summaries.push_back(summary);
  }
  expect_state_as_planned(summaries[0], summaries[1]);
}

// bf16 (float32 master weights and moments): the state is the plan's to 1%. The peaks are
// not asserted: under autocast the CPU keeps float32 LayerNorm inputs and residual
// stream beside the bf16 activations the planner counts (cost_model.md, "Recomputation":
// -15% to -39% there), measured here -15% to -18% with and without ZeRO.
TEST(ZeroMemory, Bf16StateMatchesThePlan) {
  TempDir dir;
  write_cluster(dir);
  const Json none = plan_and_train(dir, 0, "bfloat16");
  const Json one = plan_and_train(dir, 1, "bfloat16");
  ASSERT_TRUE(none.contains("memory") && one.contains("memory"));
  expect_state_as_planned(none, one);
}

}  // namespace
}  // namespace harp::testing
