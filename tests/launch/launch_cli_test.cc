// `harp data prepare` and `harp launch` driven in process through harp::cli::run: exit
// codes, the summary line on stderr, --emulate, and flags after `--` left to the worker.
#include <gtest/gtest.h>

#include "testutil/status.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "testutil/run_harp.h"
#include "harp/common/document.h"
#include "harp/data/token_file.h"
#include "harp/data/tokenizer.h"
#include "launch/test_util.h"

namespace harp::cli {
namespace {

using launch_test::TempDir;

using Result = testing::CliResult;
Result harp(std::vector<std::string> args) { return testing::run_harp(std::move(args)); }

TEST(LaunchCli, DataPrepareWritesByteTokens) {
  TempDir dir;
  std::ofstream(dir.file("in.txt")) << "hello\n";
  Result r = harp({"data", "prepare", "--input", dir.file("in.txt"), "--output", dir.file("out.bin")});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "wrote 6 tokens (byte-level, vocabulary 256; raw uint16) to " + dir.file("out.bin") + "\n");
  auto tokens = data::read_token_file(dir.file("out.bin"));
  HARP_ASSERT_OK(tokens);
  EXPECT_EQ(*tokens, (std::vector<std::uint16_t>{'h', 'e', 'l', 'l', 'o', '\n'}));
  r = harp({"data", "prepare", "--input", dir.file("in.txt"), "--output", dir.file("llmc.bin"), "--format", "llmc"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  auto llmc = data::read_tokens(dir.file("llmc.bin"));
  HARP_ASSERT_OK(llmc);
  EXPECT_EQ(llmc->format, data::TokenFormat::kLlmc16);
  EXPECT_EQ(llmc->ids.size(), 6u);
}

// A BPE tokenizer folder and a validation split: the last tenth of the tokens.
TEST(LaunchCli, DataPrepareWithATokenizerAndAValidationSplit) {
  TempDir dir;
  std::ofstream(dir.file("in.txt")) << "ab ab ab ab ab\n";
  std::filesystem::create_directories(dir.file("tok"));
  // GPT-2's 256 byte symbols, then two merges.
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[data::gpt2_byte_symbol(static_cast<unsigned char>(b))] = b;
  const std::string space = "\xc4\xa0";  // Ġ, the space's symbol
  vocab["ab"] = 256;
  vocab[space + "ab"] = 257;
  std::ofstream(dir.file("tok/vocab.json")) << vocab.dump();
  std::ofstream(dir.file("tok/merges.txt")) << "a b\n" << space << " ab\n";
  Result r = harp({"data", "prepare", "--input", dir.file("in.txt"), "--output", dir.file("train.bin"), "--tokenizer",
                   dir.file("tok"), "--val-fraction", "0.2"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "wrote 5 tokens (GPT-2 BPE (vocab.json + merges.txt), vocabulary 258; raw uint16) to " +
                       dir.file("train.bin") + " and 1 validation tokens to " + dir.file("train_val.bin") + "\n");
  auto train = data::read_tokens(dir.file("train.bin"));
  auto val = data::read_tokens(dir.file("train_val.bin"));
  HARP_ASSERT_OK(train);
  HARP_ASSERT_OK(val);
  EXPECT_EQ(train->ids, (std::vector<std::uint32_t>{256, 257, 257, 257, 257}));
  EXPECT_EQ(val->ids, (std::vector<std::uint32_t>{10}));
  r = harp({"data", "prepare", "--input", dir.file("in.txt"), "--output", dir.file("o.bin"), "--val-fraction", "0.01"});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find("leaves no validation token"), std::string::npos) << r.err;
  r = harp({"data", "prepare", "--input", dir.file("in.txt"), "--output", dir.file("o.bin"), "--val-fraction", "0.2",
            "--val-output", dir.file("o.bin")});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find("is the training output; name another file"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.bin")));
}

TEST(LaunchCli, DataPrepareBadInputIsExitOneNamingTheFile) {
  TempDir dir;
  Result r = harp({"data", "prepare", "--input", dir.file("missing.txt"), "--output", dir.file("o.bin")});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find(dir.file("missing.txt")), std::string::npos) << r.err;
  std::ofstream(dir.file("empty.txt")).flush();
  r = harp({"data", "prepare", "--input", dir.file("empty.txt"), "--output", dir.file("o.bin")});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find("empty.txt: input is empty"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.bin")));
  r = harp({"data", "prepare", "--input", dir.file("empty.txt")});
  EXPECT_EQ(r.rc, kExitUsage);
}

TEST(LaunchCli, LaunchRunsEveryRankAndSummarisesOnStderr) {
  Result r = harp({"launch", "--nproc", "2", "--", "sh", "-c", "echo hi"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] hi\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] hi\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "harp launch: all 2 workers exited 0\n");
}

TEST(LaunchCli, LaunchExitCodeIsTheWorkersAndEmulateReachesIt) {
  // `-c` and `--nproc` after `--` belong to the worker, not to harp.
  Result r = harp({"launch", "--nproc", "1", "--emulate", "--grace-s", "1", "--", "sh", "-c",
                   "echo $HARP_EMULATE $0; exit 4", "--nproc"});
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_EQ(r.out, "[rank 0] 1 --nproc\n");
  EXPECT_EQ(r.err, "harp launch: rank 0 exited with code 4\n");
  r = harp({"launch", "--nproc", "1", "--", "sh", "-c", "echo ${HARP_EMULATE:-unset}"});
  EXPECT_EQ(r.out, "[rank 0] unset\n");
}

TEST(LaunchCli, LaunchUsageErrorsAreExitTwo) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"launch", "--nproc", "2"},
           {"launch", "--nproc", "0", "--", "true"},
           {"launch", "--", "true"},
           {"launch", "--nproc", "1", "--grace-s", "-1", "--", "true"}}) {
    Result r = harp(args);
    EXPECT_EQ(r.rc, kExitUsage) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// `--nnodes N --plan PLAN`: this machine's workers are the plan's devices on it; a plan
// that does not say where its devices are, a node the plan leaves out, a --nproc that
// disagrees and a plan for more machines are refused before any launcher meets another.
TEST(LaunchCli, APlansMachinesGiveEachNodesWorkers) {
  TempDir dir;
  const std::string without = dir.file("without.json"), with = dir.file("with.json");
  const std::string stages = R"("microbatches": 1, "microbatch_size": 2, "schedule": "1f1b", "stages": [
      {"layers": [0, 2], "devices": [0, 1], "dp": 2, "fwd_s": 1, "bwd_s": 2)";
  ASSERT_TRUE(write_text_file_atomic(without, "{\"version\": 1, " + stages + "}]}").ok());
  ASSERT_TRUE(write_text_file_atomic(with, "{\"version\": 1, " + stages + ", \"nodes\": [0, 1]}]}").ok());
  auto launch = [](const std::string& plan, int nnodes, int node, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"launch",      "--nnodes",           std::to_string(nnodes),
                                     "--node-rank", std::to_string(node), "--plan",
                                     plan,          "--join-timeout-s",   "1"};
    args.insert(args.end(), more.begin(), more.end());
    args.insert(args.end(), {"--", "true"});
    return harp(args);
  };
  for (const auto& [r, want] : std::vector<std::pair<Result, std::string>>{
           {launch(without, 2, 0), "does not say which machine each device is on"},
           {launch(with, 3, 2), "the plan uses no device of machine 2"},
           {launch(with, 2, 1, {"--nproc", "2"}), "--nproc 2: the plan " + with + " runs 1 ranks on machine 1"},
           {launch(with, 1, 0), "give --nproc N"}}) {
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
}  // namespace harp::cli
