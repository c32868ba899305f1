// Hardening, fourth round, class 6: faults from the environment, each met by one line and
// the documented exit code where it hung, was killed without a word, or failed for no
// reason of the user's.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "testutil/cli_cases.h"
#include "testutil/files.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

namespace fs = std::filesystem;
const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

// The real `harp` in `dir` with `prefix` before it (VAR=value ..., or a shell prefix).
CliResult sh(const std::string& prefix, const std::vector<std::string>& args, const std::string& dir) {
  std::string cmd = "cd '" + dir + "' && " + prefix + " '" + kHarp + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " >'" + dir + "/stdout.txt' 2>'" + dir + "/stderr.txt'";
  const int status = std::system(("sh -c \"" + cmd + "\"").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read(dir + "/stdout.txt"),
          read(dir + "/stderr.txt")};
}

// Fourth round, class 6: a rendezvous file in a folder that does not exist is named at
// once (c10d's FileStore retried past 90 s with --timeout-s 5), and two one-rank runs at
// once on one machine both train (each wanted port 29500; the second failed).
TEST(Faults, ARendezvousNeedsNoPortAloneAndNamesAMissingFolder) {
  TempDir d;
  one_device_job(d);
  CliResult r =
      sh("HARP_STORE_FILE=" + d.file("missing/store"),
         {"train", "--plan", d.file("p.json"), "--steps", "1", "--out", d.file("o"), "--quiet", "--timeout-s", "5"},
         d.path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("its folder does not exist"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  fs::create_directories(d.file("b"));
  const std::string train = "'" + kHarp + "' train --plan '" + d.file("p.json") + "' --steps 2 --quiet --out ";
  const std::string both = "cd '" + d.path() + "' && (" + train + "'" + d.file("r1") + "' 2>'" + d.file("e1") + "' & " +
                           train + "'" + d.file("r2") + "' 2>'" + d.file("e2") + "'; a=$?; wait $!; " +
                           "b=$?; exit $((a + b)))";
  const int status = std::system(("bash -c \"" + both + "\"").c_str());
  EXPECT_EQ(WEXITSTATUS(status), 0) << read(d.file("e1")) << read(d.file("e2"));
  EXPECT_TRUE(fs::exists(d.file("r1/summary.json")));
  EXPECT_TRUE(fs::exists(d.file("r2/summary.json")));
}

// A run whose stage cannot hold its weights and AdamW state under the process's memory
// limit is refused before any work (it was killed by the kernel 18 s in, without a word);
// harp profile refused the same job up front already.
TEST(Faults, ATrainingRunTooLargeForItsMemoryLimitIsRefusedUpFront) {
  TempDir d;
  // A machine the plan believes has 64 GiB; the run gets 2.
  write(d.file("one.yaml"),
        "version: 1\nname: one\ndevices:\n  - {name: big-cpu, peak_tflops: 0.5, memory_gib: 64, "
        "memory_bandwidth_gbs: 25}\nsubclusters:\n  - {name: a, device: big-cpu, nodes: 1, "
        "devices_per_node: 1}\n");
  write(d.file("job.yaml"),
        "version: 1\ncluster: one.yaml\nmodel: {family: gpt, preset: gpt-1.3b, granularity: 2}\n"
        "planner: {microbatches: 8, microbatch_size: 1}\n");
  const CliResult planned = run_harp({"plan", "--job", d.file("job.yaml"), "--output", d.file("p.json")});
  ASSERT_EQ(planned.rc, 0) << planned.err;
  const MemoryCgroup group(2ll << 30);
  if (group.path.empty()) GTEST_SKIP() << "no cgroup can be made here (not root?)";
  const CliResult r = sh(
      group.enter(), {"train", "--plan", d.file("p.json"), "--steps", "1", "--out", d.file("o"), "--quiet"}, d.path());
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_NE(r.err.find("gradients and AdamW state alone take 19."), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this process may use 2.0 GiB (the cgroup's memory limit)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d.file("o/metrics.jsonl")));
}

}  // namespace
}  // namespace harp::testing
