// Job files: sections, their field paths in messages, and the training section
// (config::TrainConfig) read, validated and resolved with the job.
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
  // A section's file name with a NUL byte names the job's field (was: only the cut-short
  // file name, "c.yaml...: the file name contains a NUL byte").
  for (const char* key : {"cluster", "model"}) {
    const std::string yaml = std::string(key) == "cluster" ? std::string("cluster: \"c.yaml\\0x\"\nmodel: {preset: gpt-tiny}\n")
                                                           : cl + "model: \"m.yaml\\0x\"\n";
    const std::string m = bad(yaml);
    EXPECT_NE(m.find(std::string("job.yaml: ") + key + " = "), std::string::npos) << m;
    EXPECT_NE(m.find("contains a NUL byte"), std::string::npos) << m;
  }
}

// A one-device gpt-tiny job with the sections `more`.
StatusOr<Job> tiny_job(const std::string& more) {
  auto doc = parse_yaml_text(
      "cluster: {subclusters: [{name: a, device: L40S, nodes: 1, devices_per_node: 1}]}\nmodel: {preset: gpt-tiny}\n" +
          more,
      "job.yaml");
  HARP_CHECK(doc.ok()) << doc.status().to_string();
  return parse_job(*doc, "job.yaml");
}

// `schedule.kind` is what `harp plan --schedule` defaults to: a kind or auto; absent, none.
TEST(Job, TheScheduleKindIsKeptAsGiven) {
  auto none = tiny_job("");
  HARP_ASSERT_OK(none);
  EXPECT_EQ(none->schedule, "");
  EXPECT_TRUE(none->resolved["schedule"].empty());
  for (const char* kind : {"auto", "harp-zb", "1f1b"}) {
    auto set = tiny_job(std::string("schedule: {kind: ") + kind + "}\n");
    HARP_ASSERT_OK(set);
    EXPECT_EQ(set->schedule, kind);
    EXPECT_EQ(set->resolved["schedule"]["kind"], kind);
  }
}

// Every search setting can be set in the job file (flags of harp plan override them).
TEST(Job, ThePlannerSectionHoldsEverySearchSetting) {
  auto load = tiny_job;
  auto defaults = load("");
  HARP_ASSERT_OK(defaults);
  EXPECT_EQ(defaults->planner.max_tp, 0);
  EXPECT_FALSE(defaults->planner.allow_idle_devices);
  EXPECT_TRUE(defaults->planner.fixed_order);
  EXPECT_TRUE(defaults->planner.schedule_in_search);
  auto set = load("planner: {max_tp: 2, allow_idle_devices: true, fixed_order: false, search_schedule: 1f1b}\n");
  HARP_ASSERT_OK(set);
  EXPECT_EQ(set->planner.max_tp, 2);
  EXPECT_TRUE(set->planner.allow_idle_devices);
  EXPECT_FALSE(set->planner.fixed_order);
  EXPECT_FALSE(set->planner.schedule_in_search);
  EXPECT_EQ(set->resolved["planner"]["search_schedule"], "1f1b");
  EXPECT_EQ(set->resolved["planner"]["max_tp"], 2);
  for (const auto& [yaml, path] : std::vector<std::pair<std::string, std::string>>{
           {"planner: {max_tp: -1}\n", "planner.max_tp"},
           {"planner: {fixed_order: maybe}\n", "planner.fixed_order"},
           {"planner: {search_schedule: gpipe}\n", "planner.search_schedule"}}) {
    auto bad = load(yaml);
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status().message();
  }
}

// The planner's bytes follow the dtype the job trains in, unless the cost section says.
TEST(Job, PlannerBytesFollowTheTrainingDtype) {
  auto load = [&](const std::string& more) {
    auto j = tiny_job(more);
    HARP_CHECK(j.ok()) << j.status().to_string();
    return std::make_pair(j->cost.activation_bytes_scale, j->cost.gradient_bytes_per_param_byte);
  };
  using P = std::pair<double, double>;
  EXPECT_EQ(load(""), P(1, 1));  // no training section: mixed precision, fp16 figures
  EXPECT_EQ(load("training: {steps: 2}\n"), P(2, 2));  // float32, the default
  EXPECT_EQ(load("training: {dtype: float64}\n"), P(4, 4));
  // bf16 and fp16 runs keep float32 master weights: their gradients, and so the
  // all-reduce, are float32 unless grad_reduce_dtype says otherwise.
  EXPECT_EQ(load("training: {dtype: bfloat16}\n"), P(1, 2));
  EXPECT_EQ(load("training: {dtype: float16}\n"), P(1, 2));
  EXPECT_EQ(load("training: {dtype: bfloat16, grad_reduce_dtype: bfloat16}\n"), P(1, 1));
  EXPECT_EQ(load("training: {dtype: float64, grad_reduce_dtype: float32}\n"), P(4, 2));
  EXPECT_EQ(load("training: {dtype: float64}\ncost: {activation_bytes_scale: 3}\n"), P(3, 4));
  EXPECT_EQ(load("training: {steps: 2}\ncost: {gradient_bytes_per_param_byte: 2}\n"), P(2, 2));  // agrees
  // One source: a cost knob that contradicts what the run sends is refused.
  auto contradicting = tiny_job("training: {dtype: bfloat16}\ncost: {gradient_bytes_per_param_byte: 1}\n");
  ASSERT_FALSE(contradicting.ok());
  EXPECT_NE(contradicting.status().message().find("cost.gradient_bytes_per_param_byte"), std::string::npos);
  EXPECT_NE(contradicting.status().message().find("float32 gradients"), std::string::npos)
      << contradicting.status().message();
}

// The training state and what ZeRO shards of it follow the run too: HARP's runtime keeps
// float32 (float64) parameters that are the master weights beside their gradients and
// Adam's m and v, so ZeRO shards half the state and its all-gather moves the masters;
// planner.zero takes a level or auto.
TEST(Job, ShardedStateFollowsTheTrainingDtype) {
  auto load = [&](const std::string& more) {
    auto j = tiny_job(more);
    HARP_CHECK(j.ok()) << j.status().to_string();
    return std::vector<double>{j->cost.state_bytes_per_param_byte, j->cost.optimizer_bytes_per_param_byte,
                               j->cost.parameter_bytes_per_param_byte};
  };
  using V = std::vector<double>;
  EXPECT_EQ(load(""), V({8, 6, 1}));  // no training section: Megatron's mixed precision
  EXPECT_EQ(load("training: {steps: 2}\n"), V({8, 4, 2}));
  EXPECT_EQ(load("training: {dtype: bfloat16}\n"), V({8, 4, 2}));
  EXPECT_EQ(load("training: {dtype: float64}\n"), V({16, 8, 4}));
  EXPECT_EQ(load("training: {steps: 2}\ncost: {optimizer_bytes_per_param_byte: 5}\n"), V({8, 5, 2}));
  auto over = tiny_job("cost: {optimizer_bytes_per_param_byte: 9}\n");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("cost.optimizer_bytes_per_param_byte"), std::string::npos)
      << over.status().message();
  for (const std::string zero : {"0", "1", "2", "auto"}) {
    auto j = tiny_job("planner: {zero: " + zero + "}\n");
    ASSERT_TRUE(j.ok()) << j.status().to_string();
    EXPECT_EQ(j->planner.zero, zero);
  }
  auto refused = tiny_job("planner: {zero: 3}\n");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("planner.zero"), std::string::npos) << refused.status().message();
}

// bfloat16 on a GPU without it (V100, T4, or a declared device below compute capability
// 8.0) is refused in one line naming the device and the fix; runs on the CPU use the
// cluster's names for emulation and may.
TEST(Job, Bfloat16OnAGpuWithoutItIsRefusedNamingIt) {
  auto load = [](const std::string& device, const std::string& training) {
    const std::string yaml =
        "cluster: {"
        "subclusters: [{name: fast, device: A100-80GB, nodes: 1, devices_per_node: 1}, "
        "{name: old, device: " +
        device +
        ", nodes: 1, devices_per_node: 1}], "
        "links: [{between: [fast, old], bandwidth_gbps: 25}]}\nmodel: {preset: gpt-tiny}\n" +
        training;
    auto doc = parse_yaml_text(yaml, "/jobs/job.yaml");
    return parse_job(*doc, "/jobs/job.yaml");
  };
  auto v100 = load("V100-32GB", "training: {dtype: bfloat16, device: cuda}\n");
  ASSERT_FALSE(v100.ok());
  EXPECT_EQ(v100.status().message().find('\n'), std::string::npos);
  EXPECT_NE(v100.status().message().find("training.dtype = \"bfloat16\": V100-32GB (subcluster old, compute capability "
                                         "7.0) has no bfloat16 arithmetic; fix: train in `dtype: float16`"),
            std::string::npos)
      << v100.status().message();
  auto reduce = load("T4", "training: {dtype: float16, grad_reduce_dtype: bfloat16}\n");
  ASSERT_FALSE(reduce.ok());
  EXPECT_NE(reduce.status().message().find("training.grad_reduce_dtype"), std::string::npos);
  EXPECT_TRUE(load("V100-32GB", "training: {dtype: float16, device: cuda}\n").ok());
  EXPECT_TRUE(load("V100-32GB", "training: {dtype: bfloat16, device: cpu}\n").ok());  // emulation
  EXPECT_TRUE(load("A100-40GB", "training: {dtype: bfloat16}\n").ok());
}

}  // namespace
}  // namespace harp::job

namespace harp::config {
namespace {

// The training section is read with the job, validated with field paths, and resolved.
TEST(TrainConfig, ReadFromTheJobAndValidated) {
  const std::string cl =
      "cluster: {subclusters: [{name: a, device: L40S, nodes: 1, devices_per_node: 1}]}\nmodel: {preset: gpt-tiny}\n";
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
  auto bf16 = load("training: {dtype: bfloat16, grad_reduce_dtype: float16, recompute: full}\n");
  HARP_ASSERT_OK(bf16);
  EXPECT_EQ(bf16->training.dtype, Dtype::kBFloat16);  // parsed once, when the file is read
  EXPECT_EQ(bf16->training.grad_reduce_dtype, GradReduceDtype::kFloat16);
  EXPECT_EQ(bf16->training.recompute, RunRecompute::kFull);
  EXPECT_EQ(bf16->resolved["training"]["dtype"], "bfloat16");
  TrainConfig c;
  c.lr = std::nan("");
  EXPECT_NE(c.validate("cli").message().find("training.lr = nan"), std::string::npos) << c.validate("cli").message();
}

// One name table per enum: every name parses back to its value, and messages list them.
TEST(TrainConfig, EveryNameOfEveryTableParsesBackToItsValue) {
  auto round_trip = [](auto value) {
    using E = decltype(value);
    for (const auto& [v, name] : name_table<E>()) {
      E back{};
      ASSERT_TRUE(parse_name(name, &back)) << name;
      EXPECT_EQ(back, v) << name;
      EXPECT_EQ(name_of(v), name);
    }
    E none{};
    EXPECT_FALSE(parse_name("fp8", &none));
  };
  round_trip(Dtype{});
  round_trip(Device{});
  round_trip(LossScale{});
  round_trip(GradReduceDtype{});
  round_trip(RunRecompute{});
  EXPECT_EQ(names_text<Dtype>(), "float32, float64, bfloat16 or float16");
  EXPECT_EQ(name_map<Device>().at("cuda"), Device::kCuda);
}

}  // namespace
}  // namespace harp::config
