// Hardening, fourth round, class 4: one reader rule for duplicate keys, whole numbers and
// magnitudes, and tables that stay tables. Each case was accepted before: a key twice in a
// JSON file (the last one counted), a run summary's 4294967298 stages read as 2, a
// measured 1e-300 s printed as a 300-digit ratio, a 1.7e308 loss drawn as NaN coordinates,
// a newline in a strategy name splitting the table's row, two GPUs imported as one device
// type, and an imported time of 1e296 s written into a profile that harp then refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "testutil/cli_cases.h"
#include "testutil/files.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

namespace fs = std::filesystem;
const std::string kSource = HARP_SOURCE_DIR;
const std::string kSailor = std::string(HARP_TEST_DATA_DIR) + "/sailor/OPT-350";

TEST(Readers, AKeyTwiceInAJsonObjectIsRefused) {
  TempDir d;
  write(d.file("p.json"), R"({"version": 1, "microbatches": 8, "microbatches": 4, "schedule": "1f1b",
      "stages": [{"subcluster_name": "a", "fwd_s": 0.02, "bwd_s": 0.04}]})");
  CliResult r = run_harp({"simulate", "--plan", d.file("p.json")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("the key `microbatches` appears twice in one object"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  // The same key in two objects is no duplicate.
  write(d.file("ok.json"), R"({"version": 1, "microbatches": 8, "schedule": "1f1b",
      "stages": [{"subcluster_name": "a", "fwd_s": 0.02, "bwd_s": 0.04, "comm_s": 0.001},
                 {"subcluster_name": "a", "fwd_s": 0.02, "bwd_s": 0.04}]})");
  r = run_harp({"simulate", "--plan", d.file("ok.json")});
  EXPECT_EQ(r.rc, 0) << r.err;
  // An imported Metis profile, through the same reader.
  const std::string metis = d.file("metis");
  fs::create_directories(metis);
  std::string text = read(kSailor + "/A100-40/mbs1_tmp1.json");
  text.insert(text.find('{') + 1, "\"execution_time\": {},");
  write(metis + "/DeviceType.A100-40_tp1_bs1.json", text);
  r = run_harp({"profile", "import", "--format", "metis", metis, "--job", kSource + "/examples/jobs/opt350_sailor.yaml",
                "-o", d.file("imported.json")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("the key `execution_time` appears twice"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d.file("imported.json")));
}

// A run folder holding summary.json (and metrics.jsonl) as `harp train` writes them.
std::string run_dir(const TempDir& d, const std::string& name, const std::string& strategy, const std::string& stages,
                    const std::string& measured, const std::string& loss = "2.5") {
  const std::string dir = d.file(name);
  fs::create_directories(dir);
  write(dir + "/summary.json", "{\"strategy\": " + Json(strategy).dump() +
                                   ", \"schedule\": \"1f1b\", \"planned_schedule\": \"1f1b\", \"stages\": " + stages +
                                   ", \"predicted_s\": 1.0, \"measured_median_s\": " + measured + "}");
  write(dir + "/metrics.jsonl", "{\"step\": 0, \"loss\": 3.0, \"iteration_s\": 1.0}\n{\"step\": 1, \"loss\": " + loss +
                                    ", \"iteration_s\": 1.0}\n");
  return dir;
}

TEST(Readers, RunRecordsAreWholeNumbersAndPlausibleMagnitudes) {
  TempDir d;
  const std::string good = run_dir(d, "good", "uniform", "2", "1.1");
  CliResult r = run_harp({"trace", "runs", good, run_dir(d, "wrapped", "harp", "4294967298", "1.0")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("stages = 4294967298: must be a whole number from 1 to 4096"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  r = run_harp({"trace", "runs", good, run_dir(d, "tiny", "harp", "2", "1e-300")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("measured_median_s is missing or not a time between 1e-06 and 1e+06 s"), std::string::npos)
      << r.err;
  for (const char* loss : {"1.7e308", "-1.7e308"}) {
    r = run_harp({"trace", "runs", good, run_dir(d, "huge", "harp", "2", "1.0", loss), "--svg", d.file("c.svg")});
    EXPECT_EQ(r.rc, 1) << loss;
    EXPECT_NE(r.err.find("line 2: loss = "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("must be within +-1e15"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(d.file("c.svg")));
  }
  // A diverged but real run is drawn, with no NaN coordinate.
  r = run_harp({"trace", "runs", good, run_dir(d, "diverged", "harp", "2", "1.0", "1e12"), "--svg", d.file("c.svg")});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read(d.file("c.svg")).find("nan"), std::string::npos);
}

TEST(Readers, ANewlineInANameStaysInItsRow) {
  TempDir d;
  const CliResult r = run_harp({"trace", "runs", run_dir(d, "a", "uniform", "2", "1.1"),
                                run_dir(d, "b", "harp\nhomogeneous  9.9  9.9", "2", "1.0")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("harp\\nhomogeneous"), std::string::npos) << r.out;
  // Header, rule, two rows; whatever follows the table is not a row of it.
  const size_t table_end = r.out.find("\n\n");
  const std::string table = r.out.substr(0, table_end);
  EXPECT_EQ(lines(table + "\n"), 4) << r.out;
}

TEST(Readers, TwoGpusAreNotImportedAsOneDeviceType) {
  TempDir d;
  const std::string job = kSource + "/examples/jobs/opt350_sailor.yaml";
  CliResult r = run_harp({"profile", "import", "--format", "sailor", kSailor, "--job", job, "--gpu", "A100-40=gpu",
                          "--gpu", "V100-16=gpu", "-o", d.file("p.json")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("device type gpu is already A100-40's"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_FALSE(fs::exists(d.file("p.json")));
}

TEST(Readers, AnImportWritesOnlyAProfileHarpReadsBack) {
  TempDir d;
  const std::string src = d.file("sailor");
  fs::create_directories(src + "/A100-40");
  std::string text = read(kSailor + "/A100-40/mbs1_tmp1.json");
  const std::string key = "\"layer_compute_total_ms\": [";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  const size_t first = at + key.size(), comma = text.find(',', first);
  text.replace(first, comma - first, "1e299");
  write(src + "/A100-40/mbs1_tmp1.json", text);
  const CliResult r = run_harp({"profile", "import", "--format", "sailor", src, "--job",
                                kSource + "/examples/jobs/opt350_sailor.yaml", "-o", d.file("p.json")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cannot read back"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("between 0 and 1e+06 s"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_FALSE(fs::exists(d.file("p.json")));
}

}  // namespace
}  // namespace harp::testing
