// Hardening, fourth round (issue 62): no command writes over a file it read, and a bad flag
// value is a bad command line on every command. In process, as cli_test.
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
const std::string kSource = HARP_SOURCE_DIR;

// Every command that only reads its inputs refuses an output that is one of the files it
// read, whatever flag names it (common/inputs.h): before, `harp plan --output` naming the
// job's cluster file replaced the cluster with a plan, `harp profile import -o` naming its
// job replaced the job, and `harp trace runs --svg RUN/metrics.jsonl` the run's records.
TEST(Hardening, NoCommandWritesOverAFileItRead) {
  TempDir d;
  one_device_job(d);
  const std::string cluster = read(d.file("one.yaml")), job = read(d.file("job.yaml"));
  CliResult r = run_harp({"plan", "--job", d.file("job.yaml"), "--output", d.file("one.yaml")});
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("is the input"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_EQ(read(d.file("one.yaml")), cluster);
  // The same file by another name.
  fs::create_symlink(d.file("one.yaml"), d.file("alias.json"));
  EXPECT_EQ(run_harp({"plan", "--job", d.file("job.yaml"), "--output", d.file("alias.json")}).rc, 1);
  EXPECT_EQ(read(d.file("one.yaml")), cluster);
  // A profile import into its own job file.
  std::string opt = read(kSource + "/examples/jobs/opt350_sailor.yaml");
  const size_t at = opt.find("../clusters/");
  ASSERT_NE(at, std::string::npos);
  opt.replace(at, 3, kSource + "/examples/");  // the cluster file from the copy's folder
  write(d.file("opt.yaml"), opt);
  const std::vector<std::string> import = {"profile",
                                           "import",
                                           "--format",
                                           "sailor",
                                           kSource + "/examples/profiles/sailor/OPT-350",
                                           "--job",
                                           d.file("opt.yaml"),
                                           "--gpu",
                                           "A100-40=A100-40GB",
                                           "-o"};
  auto with_output = [&](const std::string& out) {
    std::vector<std::string> args = import;
    args.push_back(out);
    return args;
  };
  ASSERT_EQ(run_harp(with_output(d.file("imported.json"))).rc, 0) << "the import itself works";
  r = run_harp(with_output(d.file("opt.yaml")));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("is the input"), std::string::npos) << r.err;
  EXPECT_EQ(read(d.file("opt.yaml")), opt);
  EXPECT_EQ(read(d.file("job.yaml")), job);
  // Writing a new file still works, and so does the next command reading what this wrote.
  EXPECT_EQ(run_harp({"plan", "--job", d.file("job.yaml"), "--output", d.file("q.json")}).rc, 0);
  EXPECT_EQ(run_harp({"plan", "--job", d.file("job.yaml"), "--output", d.file("q.json")}).rc, 0);
}

// A bad flag value is a bad command line (exit 2) on every command: `harp testbed probe
// --sizes` and `--prefix` were checked only after the cluster was read, exit 1 (issue 62,
// class 5). Nothing is brought up: the values are refused while parsing.
TEST(Hardening, TestbedFlagsAreCommandLineErrors) {
  TempDir d;
  one_device_job(d);
  for (const std::string size : {"0", "-1K", "abc", "nan", "1e400", "257M"}) {
    CliResult r = run_harp({"testbed", "probe", "--cluster", d.file("one.yaml"), "--sizes", "1K," + size});
    EXPECT_EQ(r.rc, 2) << size << ": " << r.err;
    EXPECT_ONE_LINE(r);
  }
  for (const std::string prefix : {"Bad_Prefix", "../x", ""}) {
    for (const std::string command : {"probe", "down", "status"}) {
      CliResult r = run_harp({"testbed", command, "--cluster", d.file("one.yaml"), "--prefix", prefix});
      EXPECT_EQ(r.rc, 2) << command << " --prefix '" << prefix << "': " << r.err;
      EXPECT_ONE_LINE(r);
    }
  }
}

}  // namespace
}  // namespace harp::testing
