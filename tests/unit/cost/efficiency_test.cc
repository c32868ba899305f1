// What the analytic roofline prices each device at (cost/efficiency.h), against the
// published per-GPU figures and the fit it cites, and the costs line that names them.
#include <gtest/gtest.h>

#include "harp/cluster/cluster_io.h"
#include "harp/common/document.h"
#include "harp/cost/efficiency.h"
#include "harp/cost/layer_costs.h"
#include "harp/model/model_spec.h"

namespace harp::cost {
namespace {

// What each device computes at, by dtype (efficiency.h), against the published figures
// and the fit it cites: bf16/fp16 at 30% of a V100's tensor peak (Megatron-LM 2019: 39
// TFLOP/s of 125), 52% of an A100's (SC'21: 163 of 312), 47% of an H100's (Megatron-Core);
// float32 at 91% of the plain float32 peak (bench/sailor_fit.py on Sailor's V100 rows).
TEST(ComputeCost, RatesFollowTheArchitectureAndTheDtype) {
  auto rate = [](const std::string& device, const std::string& dtype) {
    CostConfig cfg;
    cfg.compute_dtype = dtype;
    return compute_rate(*cluster::find_builtin_device(device), cfg);
  };
  EXPECT_DOUBLE_EQ(rate("V100-32GB", "float16").flops_per_s(), 0.30 * 125e12);
  EXPECT_NEAR(rate("V100-32GB", "float16").flops_per_s(), 39e12, 2e12);
  EXPECT_DOUBLE_EQ(rate("A100-80GB", "bfloat16").flops_per_s(), 0.52 * 312e12);
  EXPECT_NEAR(rate("A100-80GB", "bfloat16").flops_per_s(), 163e12, 2e12);
  EXPECT_DOUBLE_EQ(rate("H100-80GB", "bfloat16").flops_per_s(), 0.47 * 989e12);
  EXPECT_DOUBLE_EQ(rate("A100-40GB", "float32").flops_per_s(), 0.91 * 19.5e12);
  EXPECT_DOUBLE_EQ(rate("V100-16GB", "float32").flops_per_s(), 0.91 * 15.7e12);
  EXPECT_DOUBLE_EQ(rate("A100-40GB", "float64").flops_per_s(), 0.91 * 19.5e12 / 2);
  EXPECT_NE(rate("A100-80GB", "bfloat16").basis().find("SC'21"), std::string::npos);
  EXPECT_NE(rate("V100-32GB", "float32").basis().find("Sailor"), std::string::npos);
  // The CPU (no compute capability): its one declared peak at the configured efficiency,
  // whatever the dtype, as before.
  EXPECT_DOUBLE_EQ(rate("cpu", "float32").flops_per_s(), 0.5 * 1e12);
  EXPECT_DOUBLE_EQ(rate("cpu", "bfloat16").flops_per_s(), 0.5 * 1e12);
  // A job's cost.compute_efficiency applies to every device's fp16/bf16 peak.
  CostConfig given;
  given.compute_efficiency = 0.4;
  given.efficiency_given = true;
  given.compute_dtype = "float32";
  EXPECT_DOUBLE_EQ(compute_rate(*cluster::find_builtin_device("A100-80GB"), given).flops_per_s(), 0.4 * 312e12);
  // A GPU declared without a float32 peak: its fp16/bf16 peak, and the basis says so.
  cluster::DeviceType custom{"X", 100.0};
  custom.compute_capability = 8.0;
  CostConfig f32;
  f32.compute_dtype = "float32";
  EXPECT_DOUBLE_EQ(compute_rate(custom, f32).flops_per_s(), 0.5 * 100e12);
  EXPECT_NE(compute_rate(custom, f32).basis().find("no fp32_tflops"), std::string::npos);
  // Every device type of a plan's cluster is named in its costs line, with its basis.
  auto m = model::load_model("gpt-350m");
  ASSERT_TRUE(m.ok());
  AnalyticCosts src(*m, CostConfig{});
  auto doc = parse_yaml_text(R"(
version: 1
subclusters:
  - {name: v, device: V100-32GB, nodes: 1, devices_per_node: 4, intra_node: {bandwidth_gbps: 800, latency_us: 0}}
  - {name: a, device: A100-40GB, nodes: 1, devices_per_node: 2, intra_node: {bandwidth_gbps: 800, latency_us: 0}}
links: [{between: [v, a], bandwidth_gbps: 8, latency_ms: 1}]
)", "c.yaml");
  ASSERT_TRUE(doc.ok());
  auto cluster = cluster::parse_cluster(*doc, "c.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const std::string line = src.describe_for(*cluster);
  EXPECT_NE(line.find("V100-32GB float16 30% of 125 TFLOP/s (Megatron-LM 2019"), std::string::npos) << line;
  EXPECT_NE(line.find("A100-40GB bfloat16 52% of 312 TFLOP/s (Megatron-LM, SC'21"), std::string::npos) << line;
}

}  // namespace
}  // namespace harp::cost
