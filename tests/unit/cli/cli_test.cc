// The `harp` command line end to end (in process): exit codes, one-line errors, the
// closed form from `simulate --json` on a hand-written plan (the frozen flag set:
// cli_flags_test.cc).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harp/launch/worker_env.h"

#include "testutil/status.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"
#include "harp/common/document.h"

namespace harp::cli {
namespace {

using Result = testing::CliResult;
Result harp(std::vector<std::string> args) { return testing::run_harp(std::move(args)); }

std::string example(const std::string& rel) { return std::string(HARP_SOURCE_DIR) + "/examples/" + rel; }

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = std::string(HARP_BINARY_DIR) + "/cli_test_" + name;
  std::ofstream(path) << text;
  return path;
}

size_t lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

TEST(Cli, UnknownFlagIsOneLineAndExitTwo) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"simulate", "--plan", "x.json", "--bogus"},
           {"schedule", "show", "--stages", "3", "--microbatches", "4", "--kind", "zb"},
           {"schedule", "show", "--stages", "0", "--microbatches", "4"},
           {"schedule", "show", "--stages", "two", "--microbatches", "4"},
           {"schedule", "show", "--stages", "3"},
           {"schedule", "show", "--stages", "3", "--microbatches", "4", "--launch-counts", "3,0,1"},
           {"model", "show", "gpt-1.3b", "--granularity", "9"},
           {"frobnicate"},
           {}}) {
    Result r = harp(args);
    EXPECT_EQ(r.rc, kExitUsage) << args.size() << " " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(Cli, HelpExitsZero) {
  Result r = harp({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("simulate"), std::string::npos);
  r = harp({"simulate", "--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--plan"), std::string::npos);
}

TEST(Cli, SimulateJsonGivesTheClosedFormOnAHandWrittenPlan) {
  // 4 equal stages, f = 10 ms, b = 20 ms, no communication, 8 microbatches:
  // (M + P - 1)(f + b) = 11 x 30 ms = 330 ms for 1F1B and GPipe alike.
  for (const char* kind : {"1f1b", "gpipe"}) {
    Result r = harp({"simulate", "--plan", example("plans/hand_written.json"), "--schedule", kind, "--json"});
    ASSERT_EQ(r.rc, 0) << r.err;
    auto j = parse_json_text(r.out, "stdout");
    ASSERT_TRUE(j.ok()) << r.out;
    EXPECT_NEAR((*j)["iteration_s"].get<double>(), 0.330, 1e-9) << kind;
    EXPECT_NEAR((*j)["closed_form_s"].get<double>(), 0.330, 1e-12);
    EXPECT_NEAR((*j)["bubble_fraction"].get<double>(), 3.0 / 11.0, 1e-9);
    ASSERT_EQ((*j)["stages"].size(), 4u);
    EXPECT_EQ((*j)["stages"][0]["peak_inflight"].get<int>(), std::string(kind) == "gpipe" ? 8 : 4);
    EXPECT_EQ((*j)["stages"][3]["peak_inflight"].get<int>(), std::string(kind) == "gpipe" ? 8 : 1);
  }
}

TEST(Cli, SimulateWritesTraceAndSvg) {
  std::string trace = std::string(HARP_BINARY_DIR) + "/cli_test_trace.json";
  std::string svg = std::string(HARP_BINARY_DIR) + "/cli_test.svg";
  Result r = harp({"simulate", "--plan", example("plans/slow_link.json"), "--trace", trace, "--svg", svg});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("simulated iteration"), std::string::npos);
  auto t = load_document(trace);
  HARP_ASSERT_OK(t);
  EXPECT_TRUE((*t)["traceEvents"].is_array());
  auto s = read_text_file(svg);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->rfind("<svg", 0) == 0 || s->find("<svg") != std::string::npos, true);
}

TEST(Cli, BadPlanFileIsExitOneWithTheField) {
  std::string path = write_temp("bad_plan.json",
                                R"({"microbatches": 4, "schedule": "1f1b", "stages": [{"fwd_s": -1, "bwd_s": 1}]})");
  Result r = harp({"simulate", "--plan", path});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find("stages[0].fwd_s"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  r = harp({"simulate", "--plan", "/nonexistent/plan.json"});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find("/nonexistent/plan.json"), std::string::npos);
}

TEST(Cli, ClusterAndModelShow) {
  Result r = harp({"cluster", "show", example("clusters/paper_v100_a100.yaml")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("V100-32GB"), std::string::npos);
  EXPECT_NE(r.out.find("12 devices"), std::string::npos);
  r = harp({"model", "show", "gpt-1.3b", "--granularity", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("L = 2 + 24 x 2 = 50 layers"), std::string::npos) << r.out;
  r = harp({"model", "show", "gpt-13b"});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find("gpt-1.3b"), std::string::npos);  // the list of presets
}

TEST(Cli, ScheduleShowPrintsTheGridAndVerdict) {
  Result r = harp({"schedule", "show", "--stages", "3", "--microbatches", "6", "--kind", "harp-1f1b",
                   "--launch-counts", "4,2,1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("drains"), std::string::npos);
  EXPECT_NE(r.out.find("4 2 1"), std::string::npos);  // peak in-flight equals the launch counts
  r = harp({"schedule", "show", "--stages", "3", "--microbatches", "6", "--kind", "harp-1f1b",
            "--launch-counts", "1,2,3"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("increas"), std::string::npos) << r.err;
}

TEST(Cli, PlanUniformThenSimulate) {
  std::string out = std::string(HARP_BINARY_DIR) + "/cli_test_plan.json";
  Result r = harp({"plan", "--job", example("jobs/demo.yaml"), "--strategy", "uniform", "--output", out});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("predicted iteration"), std::string::npos);
  r = harp({"simulate", "--plan", out, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = parse_json_text(r.out, "stdout");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["stages"].size(), 3u);
}

// GPT-6.7B on V100 x 8 | A100 x 2 | A100 x 2 (the paper's cluster, analytic costs):
// the job's default recomputes nothing; --recompute auto shows each stage's choice in
// the table and the plan file, and the plan it finds is predicted faster; the plan file
// reads back with the same choices and prediction.
TEST(Cli, PlanChoosesRecomputationPerStage) {
  const std::string job = example("jobs/paper_gpt6.7b.yaml");
  const std::string out = std::string(HARP_BINARY_DIR) + "/cli_test_recompute.json";
  Result none = harp({"plan", "--job", job, "--json"});
  ASSERT_EQ(none.rc, 0) << none.err;
  auto without = parse_json_text(none.out, "stdout");
  ASSERT_TRUE(without.ok());
  for (const auto& st : (*without)["stages"]) EXPECT_FALSE(st.contains("recompute")) << st.dump();
  Result r = harp({"plan", "--job", job, "--recompute", "auto", "--output", out});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("recompute"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("selective"), std::string::npos) << r.out;
  auto with = load_document(out);
  ASSERT_TRUE(with.ok());
  int recomputing = 0;
  for (const auto& st : (*with)["stages"]) recomputing += st.contains("recompute");
  EXPECT_GT(recomputing, 0);
  EXPECT_LT((*with)["predicted"]["iteration_s"].get<double>(), (*without)["predicted"]["iteration_s"].get<double>());
  r = harp({"simulate", "--plan", out, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // A bad value is one line and the usage exit code.
  r = harp({"plan", "--job", job, "--recompute", "sometimes"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
}

TEST(Cli, PlanFromMeasuredCostTableAndCompare) {
  const std::vector<std::string> base = {"plan", "--cluster", example("clusters/a100_v100_sailor.yaml"),
                                         "--costs", example("costs/opt350_sailor_mbs4.json"),
                                         "--microbatches", "32"};
  auto args = base;
  args.push_back("--json");
  Result r = harp(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = parse_json_text(r.out, "stdout");
  ASSERT_TRUE(j.ok()) << r.out;
  EXPECT_GT((*j)["predicted"]["iteration_s"].get<double>(), 0);
  EXPECT_GT((*j)["predicted"]["period_s"].get<double>(), 0);
  for (const auto& s : (*j)["stages"]) {
    for (const char* key : {"layers", "subcluster", "dp", "launch_count", "fwd_s", "bwd_s", "comm_s"})
      EXPECT_TRUE(s.contains(key)) << key;
  }
  args = base;
  args.push_back("--compare");
  args.push_back("--json");
  r = harp(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  j = parse_json_text(r.out, "stdout");
  ASSERT_TRUE(j.ok()) << r.out;
  ASSERT_EQ((*j)["strategies"].size(), 3u);
  const double harp_s = (*j)["strategies"][0]["simulated_s"].get<double>();
  for (const auto& s : (*j)["strategies"]) {
    ASSERT_TRUE(s["feasible"].get<bool>()) << s.dump();
    // Never worse than a baseline under the simulator, and never below the lower bound.
    EXPECT_LE(harp_s, s["simulated_s"].get<double>() * (1 + 1e-12)) << s.dump();
    EXPECT_GE(s["lower_bound_ratio"].get<double>(), 1.0);
  }
}

TEST(Cli, PlanInputErrors) {
  Result r = harp({"plan", "--cluster", example("clusters/a100_v100_sailor.yaml")});
  EXPECT_EQ(r.rc, kExitUsage);
  r = harp({"plan", "--job", example("jobs/demo.yaml"), "--microbatches", "zero"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  // A cost table without the cluster's second device type names the missing entry.
  std::string costs = write_temp("one_device.json", R"({"version": 1, "microbatch_size": 1,
      "layers": [{"param_bytes": 1, "output_bytes": 1, "activation_bytes": 1}],
      "devices": {"A100-40GB": {"1": {"fwd_s": [1], "bwd_s": [2]}}}})");
  r = harp({"plan", "--cluster", example("clusters/a100_v100_sailor.yaml"), "--costs", costs,
            "--microbatches", "4"});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_NE(r.err.find("devices.V100-16GB.1"), std::string::npos) << r.err;
  // A tp entry must name a power-of-two degree.
  costs = write_temp("tp3.json", R"({"version": 1, "microbatch_size": 1,
      "layers": [{"param_bytes": 1, "output_bytes": 1, "activation_bytes": 1}],
      "devices": {"A100-40GB": {"1": {"fwd_s": [1], "bwd_s": [2], "tp": {"3": {"fwd_s": [1], "bwd_s": [2]}}}}}})");
  r = harp({"plan", "--cluster", example("clusters/a100_v100_sailor.yaml"), "--costs", costs,
            "--microbatches", "4"});
  EXPECT_EQ(r.rc, kExitInput);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("devices.A100-40GB.1.tp.3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("power of two"), std::string::npos) << r.err;
}

TEST(Cli, InfeasibleIsAnAnswerWithExitThree) {
  // One huge layer that no device can hold.
  std::string costs = write_temp("huge.json", R"({"version": 1, "microbatch_size": 1,
      "layers": [{"param_bytes": 1e12, "output_bytes": 1, "activation_bytes": 1}],
      "devices": {"A100-40GB": {"1": {"fwd_s": [1], "bwd_s": [2]}},
                  "V100-16GB": {"1": {"fwd_s": [1], "bwd_s": [2]}}}})");
  Result r = harp({"plan", "--cluster", example("clusters/a100_v100_sailor.yaml"), "--costs", costs,
                   "--microbatches", "4", "--allow-idle-devices"});
  EXPECT_EQ(r.rc, kExitInfeasible) << r.out << r.err;
  EXPECT_NE(r.err.find("GiB"), std::string::npos) << r.err;
}

// --help and --help-all exist everywhere and are left out.
// Adding a flag is a conscious change: update this list with it (STYLE habit 11).
// `harp testbed set --device-slowdown NAME=F` writes the factor where the ranks of a
// testbed run read it (launch::testbed_slowdown_file); 1 takes it back, bad forms exit 2,
// `down` clears it. No namespaces needed.
TEST(Cli, TestbedDeviceSlowdownIsWhereTheRanksReadIt) {
  const std::string prefix = "harpcli" + std::to_string(getpid() % 100000);
  const std::string cluster = example("clusters/cpu_pair.yaml");
  const std::string file = launch::testbed_slowdown_file(prefix, "slow");
  Result r = harp({"testbed", "set", "--cluster", cluster, "--prefix", prefix, "--device-slowdown", "slow=3"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  std::ifstream in(file);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "3");
  EXPECT_EQ(harp({"testbed", "set", "--cluster", cluster, "--prefix", prefix, "--device-slowdown", "slow=1"}).rc, kExitOk);
  EXPECT_FALSE(std::filesystem::exists(file));
  for (const std::string bad : {"slow", "slow=0.5", "nope=2", "slow=x", "slow=1e9"})
    EXPECT_EQ(harp({"testbed", "set", "--cluster", cluster, "--prefix", prefix, "--device-slowdown", bad}).rc, kExitUsage)
        << bad;
  EXPECT_EQ(harp({"testbed", "set", "--cluster", cluster, "--prefix", prefix}).rc, kExitUsage);
  ASSERT_EQ(harp({"testbed", "set", "--cluster", cluster, "--prefix", prefix, "--device-slowdown", "fast=2"}).rc, kExitOk);
  harp({"testbed", "down", "--prefix", prefix});
  EXPECT_FALSE(std::filesystem::exists(launch::testbed_slowdown_dir(prefix)));
}

// A LLaMA is planned and simulated; trained (one rank in process: the multi-rank runs are
// runtime_dist's), exported with Hugging Face LLaMA names and read back as the initial
// weights of another run.
TEST(Cli, TinyLlamaIsPlannedTrainedExportedAndReadBack) {
  const std::string job = write_temp("llama_job.yaml", "version: 1\ncluster: " + example("clusters/cpu_pair.yaml") +
                                                           "\nmodel: {preset: llama-tiny, granularity: 2}\n"
                                                           "planner: {microbatches: 4, microbatch_size: 1}\n");
  const std::string root = std::string(HARP_BINARY_DIR) + "/cli_test_llama";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  const std::string plan = root + "/plan.json";
  Result r = harp({"plan", "--job", job, "--output", plan});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  r = harp({"simulate", "--plan", plan});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  r = harp({"model", "show", "llama-tiny"});
  EXPECT_NE(r.out.find("LLaMA, 2 blocks, hidden 64, 4 heads (2 key/value)"), std::string::npos) << r.out;
#if HARP_WITH_TORCH
  register_command("train", add_train_command);
  register_command("export", add_export_command);
  const std::string one = write_temp("llama_one_stage.json", R"({"version": 1, "microbatches": 2,
      "microbatch_size": 2, "schedule": "1f1b", "stages": [{"layers": [0, 6], "fwd_s": 1, "bwd_s": 2}]})");
  const std::vector<std::string> model = {"--model", "llama-tiny", "--granularity", "2"};
  auto with_model = [&](std::vector<std::string> args) {
    args.insert(args.begin() + 3, model.begin(), model.end());
    return args;
  };
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Pipelines of LLaMA blocks on heterogeneous GPUs, line " + std::to_string(i) + ".\n";
  const std::string corpus = write_temp("llama_corpus.txt", text);
  r = harp({"data", "prepare", "--input", corpus, "--output", root + "/tokens.bin", "--val-fraction", "0.25"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  r = harp(with_model({"train", "--plan", one, "--data", root + "/tokens.bin", "--val-data", root + "/tokens_val.bin",
                       "--eval-every", "2", "--steps", "2", "--checkpoint-every", "2", "--out", root + "/run", "--quiet"}));
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  auto summary = load_document(root + "/run/summary.json");
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  r = harp({"export", "--plan", one, "--model", "llama-tiny", "--checkpoint", root + "/run", "--output", root + "/hf"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("(LlamaForCausalLM, llama-tiny, step 2)"), std::string::npos) << r.out;
  auto config = load_document(root + "/hf/config.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ((*config)["num_key_value_heads"], 2);
  // Read back: the validation loss before the first step of a run started from the
  // export is the first run's last one (float32 weights, the same validation batches).
  r = harp(with_model({"train", "--plan", one, "--data", root + "/tokens.bin", "--val-data", root + "/tokens_val.bin",
                       "--steps", "1", "--init-from", root + "/hf", "--out", root + "/again", "--quiet"}));
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  auto first_line = read_text_file(root + "/again/metrics.jsonl");
  ASSERT_TRUE(first_line.ok());
  const Json eval = Json::parse(first_line->substr(0, first_line->find('\n')));
  EXPECT_EQ(eval["eval_after_steps"], 0);
  EXPECT_EQ(eval["val_loss"].get<double>(), (*summary)["val_loss"].get<double>());
#endif
}

}  // namespace
}  // namespace harp::cli

namespace harp::cli {
namespace {

// The demo's self-check on fake run folders: `harp trace runs --check` exits 0 when HARP
// beats both baselines by the margin and every prediction holds, 4 naming the run when not.
TEST(Cli, TraceRunsCheckPassesAndFailsNamingTheRun) {
  testing::TempDir dir;
  auto run = [&](const std::string& name, const char* strategy, const char* schedule, double predicted,
                 double measured) {
    std::filesystem::create_directories(dir.file(name));
    std::ofstream(dir.file(name + "/summary.json"))
        << "{\"strategy\": \"" << strategy << "\", \"schedule\": \"" << schedule << "\", \"planned_schedule\": \""
        << (std::string(name) == "harp_as_1f1b" ? "harp-1f1b" : schedule) << "\", \"stages\": 3, \"predicted_s\": "
        << predicted << ", \"measured_median_s\": " << measured << "}";
    return dir.file(name);
  };
  const std::string h = run("harp", "harp", "harp-1f1b", 1.25, 1.26);
  const std::string o = run("homogeneous", "homogeneous", "1f1b", 2.3, 2.15);
  const std::string u = run("uniform", "uniform", "1f1b", 2.3, 2.17);
  const std::vector<std::string> check = {"--check", "harp", "--min-speedup", "1.3", "--max-error", "0.15"};
  auto with = [&](std::vector<std::string> dirs) {
    std::vector<std::string> args = {"trace", "runs"};
    args.insert(args.end(), dirs.begin(), dirs.end());
    args.insert(args.end(), check.begin(), check.end());
    return harp(args);
  };
  Result ok = with({h, o, u});
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_NE(ok.out.find(": holds"), std::string::npos) << ok.out;
  // A baseline only 1.1x slower, and a prediction 20% short.
  const std::string close = run("uniform_close", "uniform", "1f1b", 1.11, 1.39);
  Result bad = with({h, o, close});
  EXPECT_EQ(bad.rc, kExitCheck) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("harp over uniform_close: 1.10x measured"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("uniform_close: predicted -20.1%"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;  // one line
}

}  // namespace
}  // namespace harp::cli
