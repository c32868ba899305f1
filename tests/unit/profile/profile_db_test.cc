// Profile DB: JSON round trip, merge (later wins, device records kept), and how the
// planner uses it: measured where it has the entry, the roofline where it does not, said
// per device type; a profile of another model shape or dtype refused.
#include <gtest/gtest.h>

#include "harp/cost/layer_costs.h"
#include "harp/job/job.h"
#include "harp/plan/plan_io.h"
#include "harp/planner/plan_job.h"
#include "harp/profile/profile_db.h"
#include "harp/profile/unique_layers.h"
#include "testutil/status.h"
#include "testutil/temp_dir.h"

namespace harp::profile {
namespace {

ProfileEntry entry(const std::string& device, const std::string& sig, int mbs, double fwd) {
  ProfileEntry e;
  e.key = {device, sig, mbs, 1};
  e.layer = "x";
  e.fwd_s = fwd;
  e.bwd_s = 2 * fwd;
  e.fwd_spread = 0.01;
  e.repeats = 7;
  e.activation_bytes = 1000;
  e.peak_bytes = 3000;
  return e;
}

TEST(ProfileDb, RoundTripKeepsEntriesAndDeviceRecords) {
  ProfileDb db;
  db.put(entry("cpu", "abc", 2, 0.5));
  DeviceProfile d;
  d.device = "cpu";
  d.machine = "host";
  d.libtorch = "1.13.1";
  d.dtype = "float32";
  d.threads = 1;
  d.emulated_slowdown = 2;
  d.optimizer_s_per_param_byte = 4e-9;
  db.put_device(d);
  harp::testing::TempDir dir;
  HARP_ASSERT_OK(save_profile_db(db, dir.file("p.json")));
  HARP_ASSERT_OK_AND_ASSIGN(ProfileDb back, load_profile_db(dir.file("p.json")));
  ASSERT_EQ(back.size(), 1u);
  const ProfileEntry e = back.find({"cpu", "abc", 2, 1}).value();
  EXPECT_EQ(e.fwd_s, 0.5);
  EXPECT_EQ(e.peak_bytes, 3000);
  EXPECT_EQ(e.repeats, 7);
  const DeviceProfile* bd = back.device("cpu");
  ASSERT_NE(bd, nullptr);
  EXPECT_EQ(bd->machine, "host");
  EXPECT_EQ(bd->emulated_slowdown, 2);
  EXPECT_EQ(bd->optimizer_s_per_param_byte, 4e-9);
  EXPECT_TRUE(bd->stage_fixed.empty());  // not written when not measured
  EXPECT_EQ(bd->fixed_for(1), nullptr);
}

TEST(ProfileDb, StageFixedRoundTripsAndIsFoundAtTheNearestMicrobatchSize) {
  ProfileDb db;
  DeviceProfile d;
  d.device = "cpu";
  d.optimizer_fixed_s = 2e-5;
  // A range slower than its layers alone gives a negative term: kept as measured.
  d.stage_fixed = {{1, -3e-4, 5e-4, 1e-4, 4}, {4, 6e-4, 9e-4, 2e-4, 4}};
  db.put_device(d);
  harp::testing::TempDir dir;
  HARP_ASSERT_OK(save_profile_db(db, dir.file("p.json")));
  HARP_ASSERT_OK_AND_ASSIGN(ProfileDb back, load_profile_db(dir.file("p.json")));
  const DeviceProfile* bd = back.device("cpu");
  ASSERT_NE(bd, nullptr);
  EXPECT_EQ(bd->optimizer_fixed_s, 2e-5);
  ASSERT_EQ(bd->stage_fixed.size(), 2u);
  EXPECT_EQ(bd->stage_fixed[1].bwd_s, 9e-4);
  EXPECT_EQ(bd->stage_fixed[1].probe_layers, 4);
  EXPECT_EQ(bd->stage_fixed[0].fwd_s, -3e-4);
  EXPECT_EQ(bd->fixed_for(1)->microbatch_size, 1);
  EXPECT_EQ(bd->fixed_for(2)->microbatch_size, 1);  // as near as 4: the smaller
  EXPECT_EQ(bd->fixed_for(3)->microbatch_size, 4);
  EXPECT_EQ(bd->fixed_for(8)->microbatch_size, 4);
  // One entry per microbatch size; a value out of range names its field.
  auto r = parse_profile_db(Json::parse(R"({"version": 1, "devices": [{"device": "cpu", "stage_fixed": [
      {"microbatch_size": 2, "fwd_s": 0, "bwd_s": 0}, {"microbatch_size": 2, "fwd_s": 0, "bwd_s": 0}]}]})"),
                            "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("p.json: devices[0].stage_fixed[1].microbatch_size = 2: appears twice"),
            std::string::npos)
      << r.status().message();
  r = parse_profile_db(Json::parse(R"({"version": 1, "devices": [{"device": "cpu", "stage_fixed": [
      {"microbatch_size": 1, "fwd_s": 1e9, "bwd_s": 0}]}]})"),
                       "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("devices[0].stage_fixed[0].fwd_s"), std::string::npos) << r.status().message();
}

TEST(ProfileDb, MergeLaterWinsAndCountsReplacements) {
  ProfileDb a, b;
  a.put(entry("cpu", "s1", 1, 1.0));
  a.put(entry("cpu", "s2", 1, 1.0));
  b.put(entry("cpu", "s2", 1, 2.0));
  b.put(entry("gpu", "s1", 1, 3.0));
  DeviceProfile g;
  g.device = "gpu";
  b.put_device(g);
  EXPECT_EQ(a.merge(b), 1);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a.find({"cpu", "s2", 1, 1})->fwd_s, 2.0);
  EXPECT_EQ(a.find({"cpu", "s1", 1, 1})->fwd_s, 1.0);
  EXPECT_NE(a.device("gpu"), nullptr);
  EXPECT_EQ(a.entries_of("cpu"), 2);
}

TEST(ProfileDb, BadFieldsNameTheFileAndField) {
  auto r = parse_profile_db(Json::parse(R"({"version": 1, "devices": [{"device": "cpu", "emulated_slowdown": 0.5}]})"),
                            "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("p.json: devices[0].emulated_slowdown"), std::string::npos)
      << r.status().message();
  r = parse_profile_db(Json::parse(R"({"version": 1, "entries": [{"device": "cpu", "signature": "s", "microbatch_size": 1, "fwd_s": -1, "bwd_s": 0}]})"),
                       "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("entries[0].fwd_s"), std::string::npos) << r.status().message();
}

// tiny_cpu.yaml: GPT-tiny on `cpu` (2 devices) and the emulated `cpu-slow`.
struct TempDirHolder {
  harp::testing::TempDir dir;
};

job::Job tiny_job() {
  return job::load_job(std::string(HARP_SOURCE_DIR) + "/examples/jobs/tiny_cpu.yaml").value();
}

// Entries for every unique layer of `m` on `device` at every samples count of mbs 4.
ProfileDb profile_of(const model::ModelSpec& m, const std::string& device, double scale) {
  ProfileDb db;
  for (const auto& g : unique_layers(m))
    for (int s : {1, 2, 4}) db.put(entry(device, g.signature, s, scale * 1e-3 * s));
  DeviceProfile d;
  d.device = device;
  d.dtype = "float32";
  d.optimizer_s_per_param_byte = 1e-9;
  db.put_device(d);
  return db;
}

TEST(ProfileDbPlanning, MeasuredWhereItHasEntriesAnalyticElsewhereSaidPerDevice) {
  job::Job job = tiny_job();
  harp::testing::TempDir dir;
  HARP_ASSERT_OK(save_profile_db(profile_of(job.model, "cpu", 1.0), dir.file("p.json")));
  planner::PlanRequest r;
  r.profile_file = dir.file("p.json");
  HARP_ASSERT_OK_AND_ASSIGN(planner::PlanOutcome out, planner::plan_job(job, r));
  ASSERT_TRUE(out.result.feasible);
  const plan::Plan& p = out.result.plan;
  EXPECT_NE(p.cost_source.find("cpu measured (4 of 4 unique layers"), std::string::npos) << p.cost_source;
  EXPECT_NE(p.cost_source.find("cpu-slow analytic (not in the profile)"), std::string::npos) << p.cost_source;
  for (const auto& st : p.stages) {
    const bool slow = st.subcluster_name == "slow";
    EXPECT_EQ(st.cost_source, slow ? "analytic" : "profile") << st.subcluster_name;
    if (!slow) {
      // Exactly the entries' sum over the stage's layers (fwd = 1 ms x samples each).
      EXPECT_NEAR(st.fwd_s, (st.last_layer - st.first_layer) * 1e-3 * 4 / st.dp, 1e-12);
    }
  }
}

TEST(ProfileDbPlanning, AProfileOfAnotherModelShapeIsRefused) {
  job::Job job = tiny_job();
  model::GptConfig other = job.model.gpt;
  other.hidden = 128;
  const model::ModelSpec m = model::build_gpt(other, "<test>", "model").value();
  harp::testing::TempDir dir;
  HARP_ASSERT_OK(save_profile_db(profile_of(m, "cpu", 1.0), dir.file("other.json")));
  planner::PlanRequest r;
  r.profile_file = dir.file("other.json");
  auto out = planner::plan_job(job, r);
  ASSERT_FALSE(out.ok());
  const std::string& msg = out.status().message();
  EXPECT_NE(msg.find("other.json: device cpu has"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another model shape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("harp profile --job"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(ProfileDbPlanning, AProfileInAnotherDtypeIsRefused) {
  job::Job job = tiny_job();
  ProfileDb db = profile_of(job.model, "cpu", 1.0);
  DeviceProfile d = *db.device("cpu");
  d.dtype = "float64";
  db.put_device(d);
  EXPECT_EQ(cost::ProfiledCosts::check(db, job.model, job.cluster, "float32", "p.json").message(),
            "p.json: device cpu was profiled in float64, the job trains in float32 (training.dtype); fix: profile "
            "this model (`harp profile --job JOB -o p.json`) or plan without --profile");
  HARP_EXPECT_OK(cost::ProfiledCosts::check(db, job.model, job.cluster, "float64", "p.json"));
}

TEST(ProfileDbPlanning, MeasuredOptimizerTimeReplacesTheEstimate) {
  job::Job job = tiny_job();
  ProfileDb db = profile_of(job.model, "cpu", 1.0);
  db.merge(profile_of(job.model, "cpu-slow", 2.0));
  DeviceProfile slow = *db.device("cpu-slow");
  slow.optimizer_s_per_param_byte = 1e-6;  // far from the roofline's estimate
  db.put_device(slow);
  harp::testing::TempDir dir;
  HARP_ASSERT_OK(save_profile_db(db, dir.file("p.json")));
  planner::PlanRequest r;
  r.profile_file = dir.file("p.json");
  HARP_ASSERT_OK_AND_ASSIGN(planner::PlanOutcome out, planner::plan_job(job, r));
  for (const auto& st : out.result.plan.stages) {
    double params = 0;
    for (int i = st.first_layer; i < st.last_layer; ++i) params += job.model.layers[i].param_bytes;
    const double per_byte = st.subcluster_name == "slow" ? 1e-6 : 1e-9;
    EXPECT_NEAR(st.optimizer_s, per_byte * params, 1e-12 + 1e-9 * per_byte * params) << st.subcluster_name;
  }
}

// A stage of n profiled layers costs the sum of its entries less (n - 1) x the fixed cost
// per call, i.e. the fixed cost once (closed form); a one-layer stage its entry exactly;
// the plan says which part is fixed, and the optimizer's fixed term is added per stage.
TEST(ProfileDbPlanning, AStagePaysItsFixedCostPerCallOnce) {
  job::Job job = tiny_job();
  ProfileDb db = profile_of(job.model, "cpu", 1.0);
  db.merge(profile_of(job.model, "cpu-slow", 2.0));
  DeviceProfile fast = *db.device("cpu");
  // Entries: fwd 1 ms x samples, bwd 2 ms x samples; fixed 0.3 / 0.5 ms at 1 sample and
  // 0.4 / 0.7 ms at 4 (the nearest is used for 2).
  fast.stage_fixed = {{1, 3e-4, 5e-4, 1e-4, 4}, {4, 4e-4, 7e-4, 2e-4, 4}};
  fast.optimizer_fixed_s = 2e-3;
  db.put_device(fast);
  harp::testing::TempDir dir;
  HARP_ASSERT_OK(save_profile_db(db, dir.file("p.json")));
  planner::PlanRequest r;
  r.profile_file = dir.file("p.json");
  r.strategy = planner::Strategy::kUniform;
  HARP_ASSERT_OK_AND_ASSIGN(planner::PlanOutcome out, planner::plan_job(job, r));
  int checked = 0;
  for (const auto& st : out.result.plan.stages) {
    const int n = st.last_layer - st.first_layer;
    const int samples = st.largest_share(out.result.plan.microbatch_size);
    if (st.subcluster_name == "slow") {  // no fixed term measured: the plain sum
      EXPECT_EQ(st.fixed_fwd_s, 0.0);
      EXPECT_NEAR(st.fwd_s, n * 2e-3 * samples, 1e-12);
      continue;
    }
    const double ff = samples == 1 ? 3e-4 : samples == 2 ? 3e-4 : 4e-4;
    const double fb = samples == 1 ? 5e-4 : samples == 2 ? 5e-4 : 7e-4;
    EXPECT_NEAR(st.fwd_s, n * 1e-3 * samples - (n - 1) * ff, 1e-12) << n << " layers, " << samples << " samples";
    EXPECT_NEAR(st.bwd_s, n * 2e-3 * samples - (n - 1) * fb, 1e-12);
    EXPECT_EQ(st.fixed_fwd_s, ff);
    EXPECT_EQ(st.fixed_bwd_s, fb);
    EXPECT_EQ(st.fixed_step_s, 2e-3);
    double params = 0;
    for (int i = st.first_layer; i < st.last_layer; ++i) params += job.model.layers[i].param_bytes;
    EXPECT_NEAR(st.optimizer_s, 1e-9 * params / std::max(1, st.zero >= 1 ? st.dp : 1) + 2e-3, 1e-12);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // The plan file carries the parts; the simulated trace shows them as their own slice.
  const Json doc = plan::plan_to_json(out.result.plan);
  bool written = false;
  for (const Json& st : doc["stages"]) written = written || st.contains("fixed_fwd_s");
  EXPECT_TRUE(written);
}

TEST(ProfileDbPlanning, CalibrationFromARunScalesEachDeviceTypeToItsMeasuredStages) {
  job::Job job = tiny_job();
  TempDirHolder holder;
  const std::string dir = holder.dir.path();
  ProfileDb db = profile_of(job.model, "cpu", 1.0);
  db.merge(profile_of(job.model, "cpu-slow", 2.0));
  HARP_ASSERT_OK(save_profile_db(db, dir + "/p.json"));
  planner::PlanRequest r;
  r.profile_file = dir + "/p.json";
  HARP_ASSERT_OK_AND_ASSIGN(planner::PlanOutcome first, planner::plan_job(job, r));
  // A "run" that measured every fast stage 1.5x and every slow stage 0.5x the prediction.
  plan::Plan measured = first.result.plan;
  for (auto& st : measured.stages) {
    const double f = st.subcluster_name == "slow" ? 0.5 : 1.5;
    st.fwd_s *= f;
    st.bwd_s *= f;
    st.cost_source = "measured";
  }
  HARP_ASSERT_OK(plan::save_plan(measured, dir + "/measured_plan.json"));
  r.calibrate_file = dir + "/measured_plan.json";
  r.strategy = planner::Strategy::kUniform;  // fixed cuts: the same stages, re-timed
  HARP_ASSERT_OK_AND_ASSIGN(planner::PlanOutcome uniform, planner::plan_job(job, r));
  EXPECT_NE(uniform.result.plan.cost_source.find("calibrated by"), std::string::npos);
  EXPECT_NE(uniform.result.plan.cost_source.find("cpu x1.500 / x1.500, cpu-slow x0.500 / x0.500"), std::string::npos)
      << uniform.result.plan.cost_source;
  // The same run's first stage as a mixed one of two replicas (a run reports a stage's
  // slowest replica), its second 4x slower: the calibration reads the first replica's own
  // time at its own share, as from a stage of two even replicas that measured that time.
  {
    auto calibrated_by = [&](const plan::Plan& p, const std::string& name) {
      HARP_EXPECT_OK(plan::save_plan(p, dir + "/" + name));
      r.calibrate_file = dir + "/" + name;
      auto c = planner::plan_job(job, r);
      EXPECT_TRUE(c.ok()) << c.status().message();
      if (!c.ok()) return std::string();
      const std::string& source = c->result.plan.cost_source;  // "... calibrated by FILE (factors)"
      return source.substr(source.rfind(" ("));
    };
    plan::Plan even = measured;
    even.stages[0].dp = 2;
    even.stages[0].shares = {even.microbatch_size / 2, even.microbatch_size / 2};
    plan::Plan mixed = even;
    plan::Stage& st = mixed.stages[0];
    st.replica_devices = {"cpu", "cpu-slow"};
    st.replica_compute_s = {st.fwd_s + st.bwd_s, 4 * (st.fwd_s + st.bwd_s)};
    st.fwd_s *= 4;
    st.bwd_s *= 4;
    plan::Plan slowest = even;  // what the mixed stage would calibrate to if read as a whole
    slowest.stages[0].fwd_s *= 4;
    slowest.stages[0].bwd_s *= 4;
    const std::string want = calibrated_by(even, "even.json");
    EXPECT_EQ(calibrated_by(mixed, "mixed.json"), want);
    EXPECT_NE(calibrated_by(slowest, "slowest.json"), want);
  }
  r.calibrate_file.clear();
  HARP_ASSERT_OK_AND_ASSIGN(planner::PlanOutcome plain, planner::plan_job(job, r));
  for (size_t i = 0; i < plain.result.plan.stages.size(); ++i) {
    const auto& a = plain.result.plan.stages[i];
    const auto& b = uniform.result.plan.stages[i];
    const double f = a.subcluster_name == "slow" ? 0.5 : 1.5;
    EXPECT_NEAR(b.fwd_s, f * a.fwd_s, 1e-12);
    EXPECT_NEAR(b.bwd_s, f * a.bwd_s, 1e-12);
  }
  // A run of another model is refused.
  measured.model_fingerprint = "0000";
  HARP_ASSERT_OK(plan::save_plan(measured, dir + "/other.json"));
  r.calibrate_file = dir + "/other.json";
  auto refused = planner::plan_job(job, r);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("trained another model"), std::string::npos) << refused.status().message();
  // A measured time of zero, written -0.0 too, is refused naming its field, forward as
  // backward (was: a forward one named only the device, "has a zero ... stage time").
  measured.model_fingerprint = first.result.plan.model_fingerprint;
  for (const char* key : {"fwd_s", "bwd_s"}) {
    Json doc = plan::plan_to_json(measured);
    doc["stages"][0][key] = -0.0;
    doc["stages"][0]["fwd_s"] = std::string(key) == "fwd_s" ? -0.0 : 1.0;  // fwd_s + bwd_s > 0 holds
    doc["stages"][0].erase("bwd_weight_s");  // else bwd_weight_s > bwd_s (0.0) is said first
    HARP_ASSERT_OK(write_text_file_atomic(dir + "/zero.json", doc.dump()));
    r.calibrate_file = dir + "/zero.json";
    refused = planner::plan_job(job, r);
    ASSERT_FALSE(refused.ok()) << key;
    EXPECT_NE(refused.status().message().find(std::string("stages[0].") + key + " = 0.0: a measured stage time "
                                              "must be greater than 0"),
              std::string::npos)
        << refused.status().message();
  }
}

}  // namespace
}  // namespace harp::profile
