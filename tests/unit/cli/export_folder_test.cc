// Hardening, fourth round, class 2: an export folder holds one export whole
// (common/output_folder.h), and a checkpoint step that a run did not finish is neither
// exported nor generated from. Each case failed before: an export over another model's
// export kept that model's weights/ beside the new manifest; a step without its manifest
// (the run killed while writing it) was exported with the tensors it had, exit 0; a failed
// export had already replaced files of the earlier one.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
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
const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

// The real `harp` in `dir` (export and generate need the runtime), stdin from `in`.
CliResult sh(const std::vector<std::string>& args, const std::string& dir, const std::string& in = "/dev/null") {
  std::string cmd = "cd '" + dir + "' && '" + kHarp + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " <'" + in + "' >'" + dir + "/stdout.txt' 2>'" + dir + "/stderr.txt'";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read(dir + "/stdout.txt"),
          read(dir + "/stderr.txt")};
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

struct TrainedRun {
  TempDir d;
  TrainedRun() {
    one_device_job(d);
    EXPECT_EQ(sh({"train", "--plan", d.file("p.json"), "--out", d.file("run"), "--quiet", "--steps", "4",
                  "--checkpoint-every", "2"},
                 d.path())
                  .rc,
              0);
  }
};

TEST(ExportFolder, AnExportOverAnotherModelsExportHoldsOnlyTheNewOne) {
  TrainedRun r;
  const TempDir& d = r.d;
  ASSERT_EQ(sh({"export", "--plan", d.file("p.json"), "--to", "pytorch-pipelining", "--checkpoint", d.file("run"), "-o",
                d.file("pt")},
               d.path())
                .rc,
            0);
  ASSERT_TRUE(fs::exists(d.file("pt/weights/model.safetensors")));
  write(d.file("pt/NOTES.md"), "the user's notes");
  write(d.file("ljob.yaml"),
        "version: 1\ncluster: one.yaml\nmodel: {family: llama, num_blocks: 2, hidden: 64, "
        "heads: 4, vocab: 256, seq_len: 16, granularity: 1}\n"
        "planner: {microbatches: 2, microbatch_size: 2}\n");
  ASSERT_EQ(run_harp({"plan", "--job", d.file("ljob.yaml"), "--output", d.file("l.json")}).rc, 0);
  const CliResult r2 =
      sh({"export", "--plan", d.file("l.json"), "--to", "pytorch-pipelining", "-o", d.file("pt")}, d.path());
  ASSERT_EQ(r2.rc, 0) << r2.err;
  const Json m = Json::parse(read(d.file("pt/manifest.json")));
  EXPECT_EQ(m["model_config"]["family"], "llama");
  EXPECT_FALSE(fs::exists(d.file("pt/weights"))) << "the GPT's weights beside the LLaMA's manifest";
  EXPECT_EQ(read(d.file("pt/NOTES.md")), "the user's notes");
  EXPECT_EQ(entries(d.path()).count("pt"), 1u);
  for (const auto& name : entries(d.path())) EXPECT_EQ(name.find("harp-partial"), std::string::npos) << name;
}

TEST(ExportFolder, AStepTheRunDidNotFinishIsRefusedAndTheEarlierExportKept) {
  TrainedRun r;
  const TempDir& d = r.d;
  ASSERT_EQ(sh({"export", "--checkpoint", d.file("run"), "--plan", d.file("p.json"), "--step", "4", "-o", d.file("hf")},
               d.path())
                .rc,
            0);
  write(d.file("hf/tokenizer.json"), "{}");
  const std::string weights = read(d.file("hf/model.safetensors")), config = read(d.file("hf/config.json"));
  // Killed while writing step 2: its manifest, which a run writes last, is missing.
  fs::remove(d.file("run/checkpoints/step_000002/manifest.json"));
  CliResult e =
      sh({"export", "--checkpoint", d.file("run"), "--plan", d.file("p.json"), "--step", "2", "-o", d.file("hf")},
         d.path());
  EXPECT_EQ(e.rc, 1);
  EXPECT_NE(e.err.find("step_000002: has no manifest.json"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("incomplete"), std::string::npos) << e.err;
  EXPECT_ONE_LINE(e);
  EXPECT_EQ(read(d.file("hf/model.safetensors")), weights);
  EXPECT_EQ(read(d.file("hf/config.json")), config);
  EXPECT_EQ(entries(d.file("hf")), (std::set<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  for (const auto& name : entries(d.path())) EXPECT_EQ(name.find("harp-partial"), std::string::npos) << name;
  // generate names the same cause, not the plan.
  e = sh({"generate", "--checkpoint", d.file("run"), "--plan", d.file("p.json"), "--step", "2", "--max-new-tokens", "2",
          "--prompt", "hello"},
         d.path());
  EXPECT_EQ(e.rc, 1);
  EXPECT_NE(e.err.find("has no manifest.json"), std::string::npos) << e.err;
  EXPECT_ONE_LINE(e);
  // A complete step into the same folder: the weights replaced, the tokenizer kept.
  fs::remove(d.file("run/checkpoints/step_000004/stage_0.bin"));
  e = sh({"export", "--checkpoint", d.file("run"), "--plan", d.file("p.json"), "-o", d.file("hf")}, d.path());
  EXPECT_EQ(e.rc, 1);
  EXPECT_NE(e.err.find("stage_0.bin: is missing"), std::string::npos) << e.err;
  EXPECT_EQ(read(d.file("hf/model.safetensors")), weights);
}

}  // namespace
}  // namespace harp::testing
