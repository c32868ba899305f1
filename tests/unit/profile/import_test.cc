// Import of measurements in the Metis format (Sailor's published GPU profiles, a few of
// which are copied into tests/data/sailor with their MIT license): the values land in
// the profile DB exactly as the files give them (times split 1/3 forward, 2/3 backward;
// parameters halved to fp16 bytes; the lower median over a signature's layers).
#include <gtest/gtest.h>

#include <filesystem>

#include "harp/job/job.h"
#include "harp/planner/plan_job.h"
#include "harp/profile/import.h"
#include "testutil/status.h"
#include "testutil/temp_dir.h"

namespace harp::profile {
namespace {

const std::string kSailor = std::string(HARP_TEST_DATA_DIR) + "/sailor/OPT-350";

model::ModelSpec opt350() {
  return job::load_job(std::string(HARP_SOURCE_DIR) + "/examples/jobs/opt350_sailor.yaml").value().model;
}

TEST(Import, SailorFilesGiveTheirOwnValues) {
  const model::ModelSpec m = opt350();
  ImportRequest r;
  r.format = "sailor";
  r.dir = kSailor;
  HARP_ASSERT_OK_AND_ASSIGN(ProfileDb db, import_profiles(r, m));
  // 3 signatures (embedding, block, head) x (A100-40 at mbs 1 and 2, V100-16 at mbs 1).
  EXPECT_EQ(db.size(), 9u);
  const std::string head = m.layers.front().signature, block = m.layers[1].signature, tail = m.layers.back().signature;
  // A100-40/mbs1_tmp1.json: layer_compute_total_ms[0] = 0.403, [25] = 8.497; the blocks:
  // 8.692 once, 8.222999999999999 23 times (lower median: the latter).
  auto e = db.find({"A100-40GB", head, 1, 1}).value();
  EXPECT_EQ(e.fwd_s, 0.403 * 1e-3 / 3);
  EXPECT_EQ(e.bwd_s, 2 * (0.403 * 1e-3) / 3);
  EXPECT_EQ(e.param_bytes, 214433792.0 / 2);
  EXPECT_EQ(e.activation_bytes, 8388608.0);
  EXPECT_EQ(e.source, "imported");
  EXPECT_EQ(db.find({"A100-40GB", tail, 1, 1})->fwd_s, 8.497 * 1e-3 / 3);
  EXPECT_EQ(db.find({"A100-40GB", block, 1, 1})->fwd_s, 8.222999999999999 * 1e-3 / 3);
  EXPECT_EQ(db.find({"A100-40GB", block, 1, 1})->param_bytes, 50384896.0 / 2);
  EXPECT_EQ(db.find({"A100-40GB", block, 1, 1})->repeats, 24);
  // V100-16/mbs1_tmp1.json: [0] = 0.44799999999999995; optimizer_time_ms 126.204 over
  // 1629724672 fp32 parameter bytes.
  EXPECT_EQ(db.find({"V100-16GB", head, 1, 1})->fwd_s, 0.44799999999999995 * 1e-3 / 3);
  ASSERT_NE(db.device("V100-16GB"), nullptr);
  EXPECT_EQ(db.device("V100-16GB")->optimizer_s_per_param_byte, 126.204 * 1e-3 / (1629724672.0 / 2));
  EXPECT_EQ(db.device("V100-16GB")->source, "imported");
  EXPECT_TRUE(db.find({"A100-40GB", block, 2, 1}).has_value());
}

// Sailor's LLaMA-3-8B files list the final norm and the LM head as two modules (35
// entries of parameters, activations and memory) where the compute times have 34
// layers: the two are summed into our tail. Only tp 2 was measured on this A100.
TEST(Import, SailorLlamaFilesSplitTheTailInTwo) {
  auto m = model::load_model("llama-3-8b");
  HARP_ASSERT_OK(m);
  ImportRequest r;
  r.format = "sailor";
  r.dir = std::string(HARP_TEST_DATA_DIR) + "/sailor/LLAMA-3-8";
  HARP_ASSERT_OK_AND_ASSIGN(ProfileDb db, import_profiles(r, *m));
  EXPECT_EQ(db.size(), 3u);
  const std::string tail = m->layers.back().signature, block = m->layers[1].signature;
  auto t = db.find({"A100-40GB", tail, 1, 2});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->fwd_s, 3.0999999999999996 * 1e-3 / 3);
  EXPECT_EQ(t->param_bytes, (16384.0 + 16384.0) / 2);
  EXPECT_EQ(db.find({"A100-40GB", block, 1, 2})->fwd_s, 514.9 * 1e-3 / 3);
  EXPECT_FALSE(db.find({"A100-40GB", block, 1, 1}).has_value());
}

TEST(Import, MetisLayoutReadsTheSameFiles) {
  const model::ModelSpec m = opt350();
  harp::testing::TempDir dir;
  namespace fs = std::filesystem;
  fs::copy_file(kSailor + "/A100-40/mbs1_tmp1.json", dir.file("DeviceType.A100-40_tp1_bs1.json"));
  fs::copy_file(kSailor + "/A100-40/mbs2_tmp1.json", dir.file("DeviceType.A100-40_tp1_bs2.json"));
  ImportRequest r;
  r.format = "metis";
  r.dir = dir.path();
  r.gpu_names["A100-40"] = "my-a100";
  HARP_ASSERT_OK_AND_ASSIGN(ProfileDb metis, import_profiles(r, m));
  r.format = "sailor";
  r.dir = kSailor;
  HARP_ASSERT_OK_AND_ASSIGN(ProfileDb sailor, import_profiles(r, m));
  EXPECT_EQ(metis.size(), 6u);
  for (const auto& e : metis.entries()) {
    EXPECT_EQ(e.key.device, "my-a100");
    auto s = sailor.find({"my-a100", e.key.signature, e.key.microbatch_size, 1});
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->fwd_s, e.fwd_s);
    EXPECT_EQ(s->bwd_s, e.bwd_s);
  }
}

TEST(Import, AProfileOfAnotherModelIsRefusedWithTheField) {
  model::ModelSpec m = opt350();
  model::GptConfig c = m.gpt;
  c.num_blocks = 12;  // 14 layers, the files have 26
  m = model::build_gpt(c, "<test>", "model").value();
  ImportRequest r;
  r.format = "sailor";
  r.dir = kSailor;
  auto db = import_profiles(r, m);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("mbs1_tmp1.json: model.num_layers = 26: must equal the model's layer count"),
            std::string::npos)
      << db.status().message();
  r.dir = kSailor + "/missing";
  EXPECT_FALSE(import_profiles(r, opt350()).ok());
  r.dir = std::string(HARP_TEST_DATA_DIR);
  r.format = "metis";
  auto none = import_profiles(r, opt350());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no metis profile files"), std::string::npos) << none.status().message();
}

TEST(Import, ThePlannerPlansFromRealGpuMeasurements) {
  // OPT-350M on 4 A100 + 2 x 4 V100, costed by the A100-40 and V100-16 files.
  job::Job job = job::load_job(std::string(HARP_SOURCE_DIR) + "/examples/jobs/opt350_sailor.yaml").value();
  ImportRequest r;
  r.format = "sailor";
  r.dir = kSailor;
  HARP_ASSERT_OK_AND_ASSIGN(ProfileDb db, import_profiles(r, job.model));
  harp::testing::TempDir dir;
  HARP_ASSERT_OK(save_profile_db(db, dir.file("opt.json")));
  planner::PlanRequest req;
  req.profile_file = dir.file("opt.json");
  req.microbatches = 64;  // the same global batch (64), one sample per microbatch: the files' mbs 1 and 2
  HARP_ASSERT_OK_AND_ASSIGN(planner::PlanOutcome out, planner::plan_job(job, req));
  ASSERT_TRUE(out.result.feasible) << out.result.reason;
  const plan::Plan& p = out.result.plan;
  EXPECT_NE(p.cost_source.find("A100-40GB imported (3 of 3 unique layers"), std::string::npos) << p.cost_source;
  EXPECT_NE(p.cost_source.find("V100-16GB imported (3 of 3 unique layers"), std::string::npos) << p.cost_source;
  // A stage with dp = tp = 1 costs exactly the files' times of its layers at one sample; a
  // tensor-parallel stage (the test files have tp 1 only) takes the roofline anchored to
  // those times: at least the measured time split tp ways, not the bare roofline (about
  // 10x below these measurements).
  for (const auto& st : p.stages) {
    double fwd = 0;
    for (int i = st.first_layer; i < st.last_layer; ++i) {
      const std::string dev = st.subcluster_name == "a100" ? "A100-40GB" : "V100-16GB";
      fwd += db.find({dev, job.model.layers[i].signature, 1, 1})->fwd_s;
    }
    if (st.dp == 1 && st.tp == 1) {
      EXPECT_EQ(st.cost_source, "profile");
      EXPECT_NEAR(st.fwd_s, fwd, 1e-12);
    } else {
      EXPECT_GE(st.fwd_s, fwd / (st.dp * st.tp)) << "stage on " << st.subcluster_name << ", tp " << st.tp;
    }
  }
}

}  // namespace
}  // namespace harp::profile
