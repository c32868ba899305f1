// Hardening, fourth round, class 7: `harp generate` as the real executable, with the
// environment as its input. Each case failed before: a reader that went away (`| head`)
// left the model generating to the end (100,000 tokens: 53 s); under `ulimit -v 2GiB` the
// loader's "failed to map segment" came out where train, export and profile name the limit.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "testutil/cli_cases.h"
#include "testutil/files.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

// `prefix harp ARGS suffix` under bash in `dir`; the exit code is harp's (PIPESTATUS[0]).
CliResult bash(const std::string& prefix, const std::vector<std::string>& args, const std::string& suffix,
               const std::string& dir) {
  std::string cmd = "cd '" + dir + "' && " + prefix + " '" + kHarp + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>'" + dir + "/stderr.txt' " + suffix + " >'" + dir + "/stdout.txt'; exit ${PIPESTATUS[0]}";
  write(dir + "/cmd.sh", cmd + "\n");
  const int status = std::system(("bash '" + dir + "/cmd.sh'").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read(dir + "/stdout.txt"),
          read(dir + "/stderr.txt")};
}

struct Trained {
  TempDir d;
  Trained() {
    one_device_job(d);
    EXPECT_EQ(bash("",
                   {"train", "--plan", d.file("p.json"), "--out", d.file("run"), "--quiet", "--steps", "2",
                    "--checkpoint-every", "2"},
                   "", d.path())
                  .rc,
              0);
  }
  std::vector<std::string> generate(const std::string& tokens) const {
    return {"generate",         "--checkpoint", d.file("run"), "--plan", d.file("p.json"), "--prompt", "hello",
            "--max-new-tokens", tokens,         "--threads",   "1"};
  }
};

TEST(GenerateCli, AReaderThatGoesAwayStopsTheModel) {
  Trained t;
  // 100,000 tokens take about a minute on one thread; the reader takes one byte.
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = bash("timeout 40", t.generate("100000"), "| head -c 1", t.d.path());
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.rc, 0) << "124: still generating at 40 s; " << r.err;
  EXPECT_EQ(r.out, "h");
  EXPECT_EQ(r.err, "") << "nothing to say to a reader that is not there";
  EXPECT_LT(wall_s, 30);
  // The whole text when the reader stays.
  const CliResult whole = bash("", t.generate("4"), "", t.d.path());
  EXPECT_EQ(whole.rc, 0) << whole.err;
  EXPECT_EQ(whole.out.rfind("hello", 0), 0u) << whole.out;
  EXPECT_NE(whole.err.find("4 new tokens"), std::string::npos) << whole.err;
}

TEST(GenerateCli, AnAddressSpaceLimitIsNamed) {
  Trained t;
  const CliResult r = bash("ulimit -v 2097152 &&", t.generate("4"), "", t.d.path());
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_NE(r.err.find("harp generate: the address-space limit (ulimit -v) is 2 GiB"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace harp::testing
