// Job files: sections, their field paths in messages, and the training section
// (runtime::TrainConfig) read, validated and resolved with the job.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include <cmath>

#include "harp/job/job.h"

namespace harp::job {
namespace {

TEST(Job, LoadsTheDemoJob) {
  auto j = load_job(std::string(HARP_SOURCE_DIR) + "/examples/jobs/demo.yaml");
  HARP_ASSERT_OK(j);
  EXPECT_EQ(j->model.num_layers(), 50);
  EXPECT_EQ(j->cluster.num_devices(), 12);
  EXPECT_EQ(j->planner.microbatches, 32);
  EXPECT_TRUE(j->resolved.contains("cluster"));
}

TEST(Job, BadSectionsNameTheirPath) {
  auto bad = [](const std::string& yaml) {
    auto doc = parse_yaml_text(yaml, "job.yaml");
    return parse_job(*doc, "job.yaml").status().message();
  };
  const std::string cl =
      "cluster: {subclusters: [{name: a, device: T4, nodes: 1, devices_per_node: 1}]}\n";
  EXPECT_NE(bad(cl).find("model"), std::string::npos);
  EXPECT_NE(bad(cl + "model: {preset: gpt-tiny}\nplanner: {microbatches: 0}\n").find("planner.microbatches"),
            std::string::npos);
  EXPECT_NE(bad(cl + "model: {preset: gpt-tiny}\ncost: {compute_efficiency: 2}\n").find("cost.compute_efficiency"),
            std::string::npos);
  EXPECT_NE(bad(cl + "model: {preset: gpt-tiny}\nschedule: {kind: zb}\n").find("schedule.kind"),
            std::string::npos);
  EXPECT_NE(bad("cluster: missing.yaml\nmodel: {preset: gpt-tiny}\n").find("missing.yaml"),
            std::string::npos);
}

// The planner's bytes follow the dtype the job trains in, unless the cost section says.
TEST(Job, PlannerBytesFollowTheTrainingDtype) {
  const std::string base =
      "cluster: {subclusters: [{name: a, device: T4, nodes: 1, devices_per_node: 1}]}\nmodel: {preset: gpt-tiny}\n";
  auto load = [&](const std::string& more) {
    auto doc = parse_yaml_text(base + more, "job.yaml");
    auto j = parse_job(*doc, "job.yaml");
    HARP_CHECK(j.ok()) << j.status().to_string();
    return std::make_pair(j->cost.activation_bytes_scale, j->cost.gradient_bytes_per_param_byte);
  };
  using P = std::pair<double, double>;
  EXPECT_EQ(load(""), P(1, 1));  // no training section: mixed precision, fp16 figures
  EXPECT_EQ(load("training: {steps: 2}\n"), P(2, 2));  // float32, the default
  EXPECT_EQ(load("training: {dtype: float64}\n"), P(4, 4));
  EXPECT_EQ(load("training: {dtype: bfloat16}\n"), P(1, 1));
  EXPECT_EQ(load("training: {dtype: float16}\n"), P(1, 1));
  EXPECT_EQ(load("training: {dtype: float64}\ncost: {activation_bytes_scale: 3}\n"), P(3, 4));
  EXPECT_EQ(load("training: {steps: 2}\ncost: {gradient_bytes_per_param_byte: 1}\n"), P(2, 1));
}

}  // namespace
}  // namespace harp::job

namespace harp::runtime {
namespace {

// The training section is read with the job, validated with field paths, and resolved.
TEST(TrainConfig, ReadFromTheJobAndValidated) {
  const std::string cl =
      "cluster: {subclusters: [{name: a, device: T4, nodes: 1, devices_per_node: 1}]}\nmodel: {preset: gpt-tiny}\n";
  auto load = [&](const std::string& training) {
    auto doc = parse_yaml_text(cl + training, "/jobs/job.yaml");
    return job::parse_job(*doc, "/jobs/job.yaml");
  };
  auto ok = load("training: {steps: 20, lr: 0.01, data: corpus.bin, trace_steps: [3]}\n");
  HARP_ASSERT_OK(ok);
  EXPECT_EQ(ok->training.steps, 20);
  EXPECT_DOUBLE_EQ(ok->training.lr, 0.01);
  EXPECT_EQ(ok->training.data, "/jobs/corpus.bin");  // relative to the job file
  EXPECT_EQ(ok->resolved["training"]["steps"], 20);
  EXPECT_EQ(ok->resolved["training"]["warmup_steps"], 10);  // the default, resolved
  for (const auto& [yaml, path] : std::vector<std::pair<std::string, std::string>>{
           {"training: {steps: 0}\n", "training.steps"},
           {"training: {lr: -1}\n", "training.lr"},
           {"training: {trace_steps: [50]}\n", "training.trace_steps[0]"},
           {"training: {dtype: fp8}\n", "training.dtype"},
           {"training: {timeout_s: 0}\n", "training.timeout_s"},
           {"training: {keep_checkpoints: -1}\n", "training.keep_checkpoints"},
           {"training: {lrate: 1}\n", "training.lrate"},
           {"training: {device: tpu}\n", "training.device"},
           {"training: {dtype: float16, device: cpu}\n", "training.dtype = \"float16\": computes on CUDA only"},
           {"training: {loss_scale: 128}\n", "training.loss_scale"},
           {"training: {grad_reduce_dtype: float64}\n", "training.grad_reduce_dtype"},
           {"training: {grad_reduce_dtype: bfloat16, device: cpu}\n",
            "training.grad_reduce_dtype = \"bfloat16\": needs NCCL"}}) {
    auto bad = load(yaml);
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status().message();
  }
  TrainConfig c;
  c.lr = std::nan("");
  EXPECT_NE(c.validate("cli").message().find("training.lr = nan"), std::string::npos) << c.validate("cli").message();
}

}  // namespace
}  // namespace harp::runtime
