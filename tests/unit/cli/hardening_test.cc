// Hardening, second round (docs/errors.md): one regression test per class of input a
// hostile user tried, each of which the previous version accepted, crashed on, or
// answered with the wrong exit code. The torch-free commands run in process; `harp train`
// and `harp export` run as the real executable, because the environment is the input.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/data/token_file.h"
#include "harp/runtime/io/checkpoint.h"
#include "testutil/cli_cases.h"
#include "testutil/files.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

namespace fs = std::filesystem;
const std::string kSource = HARP_SOURCE_DIR;
const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

// The real `harp` with `env` before it (VAR=value ...); stderr captured.
CliResult sh(const std::string& env, const std::vector<std::string>& args, const std::string& dir) {
  std::string cmd = "cd '" + dir + "' && env " + env + " '" + kHarp + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " >'" + dir + "/stdout.txt' 2>'" + dir + "/stderr.txt'";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read(dir + "/stdout.txt"),
          read(dir + "/stderr.txt")};
}

// 1. Lost input: an output that is an input, a device or a special file is refused, and
// the input survives; a long (valid) output name still works.
TEST(Hardening, AnOutputNeverDestroysAnInputOrReplacesASpecialFile) {
  TempDir d;
  write(d.file("corpus.txt"), "hello world\nsecond line\n");
  const std::string before = read(d.file("corpus.txt"));
  CliResult r = run_harp({"data", "prepare", "--input", d.file("corpus.txt"), "--output", d.file("corpus.txt")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("is the input"), std::string::npos) << r.err;
  EXPECT_EQ(read(d.file("corpus.txt")), before);
  fs::create_symlink(d.file("corpus.txt"), d.file("alias.bin"));  // the same file by another name
  EXPECT_EQ(run_harp({"data", "prepare", "--input", d.file("corpus.txt"), "--output", d.file("alias.bin")}).rc, 1);
  EXPECT_EQ(read(d.file("corpus.txt")), before);
  ASSERT_EQ(mkfifo(d.file("fifo").c_str(), 0644), 0);
  for (const std::string& out : {std::string("/dev/stdout"), std::string("/dev/null"), d.file("fifo"), d.path()}) {
    r = run_harp({"data", "prepare", "--input", d.file("corpus.txt"), "--output", out});
    EXPECT_EQ(r.rc, 1) << out;
    EXPECT_ONE_LINE(r);
  }
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null is still a device";
  EXPECT_TRUE(S_ISFIFO((stat(d.file("fifo").c_str(), &st), st.st_mode)));
  const std::string long_name = d.file(std::string(250, 'x') + ".bin");  // 254 bytes: valid
  r = run_harp({"data", "prepare", "--input", d.file("corpus.txt"), "--output", long_name});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(long_name));
  r = run_harp({"plan", "--job", kSource + "/examples/jobs/tiny_cpu.yaml", "--output", d.file(std::string(256, 'y'))});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("at most 255"), std::string::npos) << r.err;
}

// 3. The environment: every torchrun number is read whole and in range.
TEST(Hardening, EnvironmentNumbersAreReadWholeAndInRange) {
  TempDir d;
  one_device_job(d);
  for (const std::string env : {"RANK=abc", "RANK=0.9", "RANK=4294967296", "WORLD_SIZE=1x", "WORLD_SIZE=abc",
                                 "RANK=1 WORLD_SIZE=1", "MASTER_PORT=0", "LOCAL_RANK=-1"}) {
    SCOPED_TRACE(env);
    CliResult r = sh(env, {"train", "--plan", d.file("p.json"), "--steps", "1", "--out", d.file("o"), "--quiet"},
                     d.path());
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find(env.substr(env.rfind(' ') + 1, env.find('=', env.rfind(' ') + 1) - env.rfind(' ') - 1)),
              std::string::npos)
        << r.err;
    EXPECT_ONE_LINE(r);
  }
  // With --device cuda as well (cuda:LOCAL_RANK is the rank's device; the third round's
  // case, on a machine with or without a GPU): the variable is named, not the device.
  CliResult c = sh("LOCAL_RANK=-1", {"train", "--plan", d.file("p.json"), "--steps", "1", "--out", d.file("o"),
                                     "--quiet", "--device", "cuda"},
                   d.path());
  EXPECT_EQ(c.rc, 1);
  EXPECT_NE(c.err.find("LOCAL_RANK = '-1': must be a whole number from 0"), std::string::npos) << c.err;
  EXPECT_ONE_LINE(c);
  CliResult r = sh("HARP_STORE_FILE=" + d.path(), {"train", "--plan", d.file("p.json"), "--steps", "1", "--out",
                                                    d.file("o"), "--quiet"},
                   d.path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("HARP_STORE_FILE"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
}

// 2. A checkpoint resumes its own state or nothing.
TEST(Hardening, AStageFileFromAnotherStepIsRefusedAndAResumeThatTrainsNothingIsAnError) {
  TempDir d;
  one_device_job(d);
  const std::vector<std::string> train = {"train", "--plan", d.file("p.json"), "--out", d.file("run"), "--quiet",
                                          "--checkpoint-every", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = train;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  ASSERT_EQ(sh("", with({"--steps", "4"}), d.path()).rc, 0);
  const std::string summary = read(d.file("run/summary.json"));
  CliResult r = sh("", with({"--steps", "2", "--resume"}), d.path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("nothing to train"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_EQ(read(d.file("run/summary.json")), summary) << "the finished run's summary is kept";
  fs::copy_file(d.file("run/checkpoints/step_000002/stage_0.bin"), d.file("run/checkpoints/step_000004/stage_0.bin"),
                fs::copy_options::overwrite_existing);
  r = sh("", with({"--steps", "6", "--resume"}), d.path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("step 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("copied or moved"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  // NaN weights from Hugging Face are refused, not trained into NaN losses.
  ASSERT_EQ(sh("", {"export", "--checkpoint", d.file("run"), "--plan", d.file("p.json"), "--step", "2", "-o",
                    d.file("hf")},
               d.path())
                .rc,
            0);
  std::string st = read(d.file("hf/model.safetensors"));
  std::uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | static_cast<unsigned char>(st[i]);
  const std::string nan_f32("\x00\x00\xc0\x7f", 4);
  st.replace(8 + hlen + 8, 4, nan_f32);
  write(d.file("hf/model.safetensors"), st);
  r = sh("", {"train", "--plan", d.file("p.json"), "--out", d.file("nan"), "--quiet", "--steps", "2", "--init-from",
              d.file("hf")},
         d.path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("NaN"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
}

// 4. What crashed: a checkpoint exported with another family's plan, a LLaMA whose head
// size rotary cannot turn, a calibration past the model, a peer that never starts.
TEST(Hardening, MismatchesThatCrashedAreOneLineErrors) {
  TempDir d;
  one_device_job(d, "{family: llama, num_blocks: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 16, granularity: 1}");
  ASSERT_EQ(sh("", {"train", "--plan", d.file("p.json"), "--out", d.file("llama"), "--quiet", "--steps", "2",
                    "--checkpoint-every", "2"},
               d.path())
                .rc,
            0);
  write(d.file("gjob.yaml"), "version: 1\ncluster: one.yaml\nmodel: {family: gpt, preset: gpt-tiny, granularity: 1}\n"
                             "planner: {microbatches: 2, microbatch_size: 2}\n");
  ASSERT_EQ(run_harp({"plan", "--job", d.file("gjob.yaml"), "--output", d.file("g.json")}).rc, 0);
  CliResult r = sh("", {"export", "--checkpoint", d.file("llama"), "--plan", d.file("g.json"), "-o", d.file("hf")},
                   d.path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("not a parameter"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  for (const char* heads : {"heads: 64", "heads: 21"}) {  // head size 1; 63 / 21 = 3 (odd)
    write(d.file("odd.yaml"), std::string("version: 1\ncluster: one.yaml\nmodel: {family: llama, num_blocks: 2, ") +
                                  (std::string(heads) == "heads: 21" ? "hidden: 63, " : "hidden: 64, ") + heads +
                                  ", vocab: 256, seq_len: 16}\n");
    r = run_harp({"plan", "--job", d.file("odd.yaml")});
    EXPECT_EQ(r.rc, 1) << heads;
    EXPECT_NE(r.err.find("even"), std::string::npos) << r.err;
  }
  Json measured = Json::parse(read(d.file("g.json")));
  measured["stages"][0]["layers"] = {0, 999};
  write(d.file("measured.json"), measured.dump());
  r = run_harp({"plan", "--job", d.file("gjob.yaml"), "--calibrate", d.file("measured.json")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("999"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  // Rank 0 of 2 alone: the message names rank 1.
  write(d.file("two.yaml"), "version: 1\nname: two\nsubclusters:\n  - {name: a, device: cpu, nodes: 1, "
                            "devices_per_node: 2, intra_node: {bandwidth_gbps: 10, latency_us: 5}}\n");
  write(d.file("job2.yaml"), "version: 1\ncluster: two.yaml\nmodel: {family: gpt, preset: gpt-tiny, granularity: 1}\n"
                             "planner: {strategy: uniform, microbatches: 2, microbatch_size: 2}\n");
  ASSERT_EQ(run_harp({"plan", "--job", d.file("job2.yaml"), "--output", d.file("p2.json")}).rc, 0);
  const Json p2 = Json::parse(read(d.file("p2.json")));
  int ranks = 0;
  for (const auto& s : p2["stages"]) ranks += s["dp"].get<int>() * s.value("tp", 1);
  ASSERT_EQ(ranks, 2);
  r = sh("RANK=0 WORLD_SIZE=2 MASTER_PORT=" + std::to_string(20000 + getpid() % 20000),
         {"train", "--plan", d.file("p2.json"), "--out", d.file("alone"), "--quiet", "--steps", "1", "--timeout-s", "2"},
         d.path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("rank 1 of 2 never joined"), std::string::npos) << r.err;
  EXPECT_ONE_LINE(r);
  // Rank 1 of 2 alone, and a rank told the torchrun agent hosts the store when none runs:
  // one line, without libtorch 2.11's c10d log lines before it (fourth round, class 6).
  for (const std::string agent : {"", " TORCHELASTIC_USE_AGENT_STORE=True"}) {
    r = sh("RANK=1 WORLD_SIZE=2 MASTER_PORT=" + std::to_string(20001 + getpid() % 20000) + agent,
           {"train", "--plan", d.file("p2.json"), "--out", d.file("alone1"), "--quiet", "--steps", "1", "--timeout-s",
            "1"},
           d.path());
    EXPECT_EQ(r.rc, 1) << agent;
    EXPECT_EQ(r.err.find("TCPStore.cpp"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(agent.empty() ? "is rank 0 running?" : "is torchrun's agent running?"), std::string::npos)
        << r.err;
    EXPECT_ONE_LINE(r);
  }
}

// 6. Physical quantities outside what a real cluster or run can have.
TEST(Hardening, PhysicalQuantitiesHaveRanges) {
  TempDir d;
  const std::string good = read(kSource + "/examples/clusters/cpu_hetero.yaml");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"bandwidth_gbps: 1,", "bandwidth_gbps: 1e-300,"},
           {"latency_ms: 0.5", "latency_ms: 1e308"},
           {"peak_tflops: 0.5", "peak_tflops: 1e-300"},
           {"memory_gib: 16", "memory_gib: 1e308"}}) {
    std::string text = good;
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
    write(d.file("c.yaml"), text);
    CliResult r = run_harp({"cluster", "show", d.file("c.yaml")});
    EXPECT_EQ(r.rc, 1) << to;
    EXPECT_NE(r.err.find("must be between"), std::string::npos) << r.err;
    EXPECT_ONE_LINE(r);
  }
  Json plan = Json::parse(read(kSource + "/examples/plans/slow_link.json"));
  plan["stages"][0]["fwd_s"] = 1e300;
  write(d.file("p.json"), plan.dump());
  EXPECT_EQ(run_harp({"simulate", "--plan", d.file("p.json")}).rc, 1);
  ASSERT_EQ(run_harp({"simulate", "--plan", kSource + "/examples/plans/slow_link.json", "--trace", d.file("t.json")}).rc, 0);
  Json trace = Json::parse(read(d.file("t.json")));
  for (auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X") {
      e["dur"] = -5.0;
      break;
    }
  write(d.file("neg.json"), trace.dump());
  CliResult r = run_harp({"trace", "compare", d.file("t.json"), d.file("neg.json")});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_ONE_LINE(r);
  write(d.file("db.json"), R"({"version": 1, "devices": [{"device": "cpu", "optimizer_s_per_param_byte": -1}]})");
  write(d.file("cluster.yaml"), good);
  write(d.file("job.yaml"), "version: 1\ncluster: cluster.yaml\nmodel: {family: gpt, preset: gpt-tiny}\n"
                            "planner: {microbatches: 8, microbatch_size: 4}\ntraining: {weight_decay: 1e30}\n");
  r = run_harp({"plan", "--job", d.file("job.yaml")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("weight decay"), std::string::npos) << r.err;
  write(d.file("job.yaml"), "version: 1\ncluster: cluster.yaml\nmodel: {family: gpt, preset: gpt-tiny}\n"
                            "planner: {microbatches: 8, microbatch_size: 4}\n");
  r = run_harp({"plan", "--job", d.file("job.yaml"), "--profile", d.file("db.json")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("optimizer_s_per_param_byte"), std::string::npos) << r.err;
  write(d.file("corpus.txt"), "some text\nmore text\n");
  r = run_harp({"data", "prepare", "--input", d.file("corpus.txt"), "--output", d.file("c.bin"), "--val-fraction",
                "nan"});
  EXPECT_EQ(r.rc, 2) << r.err;
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--lr", "1e30"}, {"--seed", "-1"},
                                                {"--timeout-s", "1e-9"}, {"--lr", "0"}, {"--grad-clip", "nan"}}) {
    r = sh("", {"train", "--plan", kSource + "/examples/plans/slow_link.json", flags[0], flags[1]}, d.path());
    EXPECT_EQ(r.rc, 2) << flags[0] << " " << flags[1] << ": " << r.err;
    EXPECT_ONE_LINE(r);
    EXPECT_LT(r.err.size(), 300u) << r.err;
  }
}

// 7. One validation of a plan for every command: what train refuses, simulate refuses.
TEST(Hardening, SimulateRefusesThePlansTrainRefuses) {
  TempDir d;
  const Json base = Json::parse(read(kSource + "/examples/plans/slow_link.json"));
  ASSERT_GE(base["stages"].size(), 2u);
  auto check = [&](const std::string& what, const std::function<void(Json&)>& edit) {
    Json p = base;
    edit(p);
    write(d.file("p.json"), p.dump());
    CliResult r = run_harp({"simulate", "--plan", d.file("p.json")});
    EXPECT_EQ(r.rc, 1) << what;
    EXPECT_ONE_LINE(r);
  };
  check("a device on two stages", [](Json& p) {
    p["stages"][0]["devices"] = Json::array({0});
    p["stages"][0]["dp"] = 1, p["stages"][0]["tp"] = 1;
    p["stages"][1]["devices"] = Json::array({0});
    p["stages"][1]["dp"] = 1, p["stages"][1]["tp"] = 1;
  });
  check("a device twice in one stage", [](Json& p) {
    p["stages"][0]["devices"] = Json::array({3, 3});
    p["stages"][0]["dp"] = 2, p["stages"][0]["tp"] = 1;
    p["microbatch_size"] = 2;
  });
  check("dp 3 with a microbatch of 2", [](Json& p) {
    p["microbatch_size"] = 2;
    p["stages"][0]["dp"] = 3;
    p["stages"][0].erase("devices");
  });
}

// 8. Exit codes: a worker's status maps onto the documented ones; a bad flag is exit 2.
TEST(Hardening, ExitCodesAreTheDocumentedOnes) {
  TempDir d;
  CliResult r = run_harp({"launch", "--nproc", "1", "--", "sh", "-c", "exit 127"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("127"), std::string::npos) << r.err;
  r = run_harp({"launch", "--nproc", "1", "--", "sh", "-c", "kill -SEGV $$"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("signal 11"), std::string::npos) << r.err;
  r = run_harp({"launch", "--nproc", "1", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.rc, 3) << "harp's own codes pass through";
  EXPECT_EQ(run_harp({"launch", "--grace-s", "nan", "--nproc", "1", "--", "true"}).rc, 2);
  r = run_harp({"plan", "--job", kSource + "/examples/jobs/tiny_cpu.yaml", "--granularity", "9"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.find("tiny_cpu.yaml"), std::string::npos) << "the flag is blamed, not the job: " << r.err;
}

// 9. Messages: the project's range messages, long names clipped, empty and NUL paths,
// duplicate keys and documents, unknown commands.
TEST(Hardening, MessagesNameTheProblemInOneShortLine) {
  TempDir d;
  CliResult r = run_harp({"schedule", "show", "--stages", "0", "--microbatches", "2"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.find("179769"), std::string::npos) << r.err;
  EXPECT_LT(r.err.size(), 200u) << r.err;
  std::string cluster = read(kSource + "/examples/clusters/cpu_hetero.yaml");
  cluster.replace(cluster.find("device: cpu-slow"), 16, "device: " + std::string(100000, 'n'));
  write(d.file("c.yaml"), cluster);
  r = run_harp({"cluster", "show", d.file("c.yaml")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_LT(r.err.size(), 2000u);
  write(d.file("cluster.yaml"), read(kSource + "/examples/clusters/cpu_hetero.yaml"));
  write(d.file("job.yaml"), "version: 1\ncluster: ''\nmodel: {family: gpt, preset: gpt-tiny}\n");
  r = run_harp({"plan", "--job", d.file("job.yaml")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cluster"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("directory"), std::string::npos) << r.err;
  write(d.file("job.json"), R"({"version": 1, "cluster": "cluster.yaml\u0000x", "model": {"family": "gpt", "preset": "gpt-tiny"}})");
  r = run_harp({"plan", "--job", d.file("job.json")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("NUL"), std::string::npos) << r.err;
  write(d.file("dup.yaml"), "version: 1\nname: a\nname: b\nsubclusters:\n  - {name: a, device: cpu, nodes: 1, "
                            "devices_per_node: 1}\n");
  r = run_harp({"cluster", "show", d.file("dup.yaml")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("twice"), std::string::npos) << r.err;
  write(d.file("two_docs.yaml"), read(kSource + "/examples/clusters/cpu_hetero.yaml") + "---\nversion: 1\n");
  r = run_harp({"cluster", "show", d.file("two_docs.yaml")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("documents"), std::string::npos) << r.err;
  for (const std::vector<std::string>& args : {std::vector<std::string>{"generat"}, {"generat", "--help"}}) {
    r = run_harp(args);
    EXPECT_EQ(r.rc, 2);
    EXPECT_NE(r.err.find("unknown command 'generat'"), std::string::npos) << r.err;
  }
}

// 5. A stage file larger than this machine's memory is refused before a byte is read
// (the previous reader allocated the whole file, then its copy: std::bad_alloc). A sparse
// file stands in for one: it takes no disk.
TEST(Hardening, AStageFileLargerThanMemoryIsRefusedBeforeReading) {
  TempDir d;
  const std::string f = d.file("stage_0.bin");
  write(f, "HARPCKPT2\n");
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  ASSERT_GT(pages, 0);
  fs::resize_file(f, static_cast<std::uintmax_t>(pages) * static_cast<std::uintmax_t>(page) + (1ull << 30));
  auto r = runtime::read_tensor_file(f, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("this process may use"), std::string::npos) << r.status().message();
}

// Every size limit of docs/file_formats.md refused one past its value, before reading
// (sparse files stand in for the large ones: they take no disk).
TEST(Hardening, SizeLimitsAreEnforcedAtTheirValue) {
  TempDir d;
  auto sparse = [&](const std::string& name, std::uintmax_t bytes, const std::string& head = "") {
    write(d.file(name), head);
    fs::resize_file(d.file(name), bytes);
    return d.file(name);
  };
  // Token files: 4 GiB mapped (not read), one more 2-byte token refused.
  auto at = data::MappedTokens::open(sparse("at.bin", 4ull << 30));
  EXPECT_TRUE(at.ok()) << at.status().message();
  auto past = data::MappedTokens::open(sparse("past.bin", (4ull << 30) + 2));
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("over the limit"), std::string::npos) << past.status().message();
  // Text to prepare: 1 GiB; one byte more is refused before a byte is read.
  CliResult r = run_harp({"data", "prepare", "--input", sparse("big.txt", (1ull << 30) + 1), "--output",
                          d.file("t.bin")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("over the limit"), std::string::npos) << r.err;
  // A checkpoint stage file: 1 TiB.
  auto ck = runtime::read_tensor_file(sparse("stage_0.bin", (1ull << 40) + 1, "HARPCKPT2\n"), nullptr);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("over the limit"), std::string::npos) << ck.status().message();
  // A cost table: 4,098 layers; the subcluster-order search: 8 subclusters.
  Json costs = Json::parse(read(kSource + "/examples/costs/opt350_sailor_mbs4.json"));
  const Json layer = costs["layers"][1];
  while (costs["layers"].size() < 4099) costs["layers"].push_back(layer);
  write(d.file("costs.json"), costs.dump());
  r = run_harp({"plan", "--cluster", kSource + "/examples/clusters/a100_v100_sailor.yaml", "--costs",
                d.file("costs.json"), "--microbatches", "8"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("more than 4098 layers"), std::string::npos) << r.err;
  std::string cluster = "version: 1\nname: x\nsubclusters:\n";
  for (int i = 0; i < 9; ++i)
    cluster += "  - {name: s" + std::to_string(i) + ", device: cpu, nodes: 1, devices_per_node: 1}\n";
  cluster += "links:\n";
  for (int i = 0; i < 8; ++i)
    cluster += "  - {between: [s" + std::to_string(i) + ", s" + std::to_string(i + 1) + "], bandwidth_gbps: 1}\n";
  write(d.file("nine.yaml"), cluster);
  write(d.file("nine_job.yaml"), "version: 1\ncluster: nine.yaml\nmodel: {family: gpt, preset: gpt-tiny, "
                                 "granularity: 4}\nplanner: {microbatches: 4, microbatch_size: 1, fixed_order: false}\n");
  r = run_harp({"plan", "--job", d.file("nine_job.yaml")});
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("at most 8 subclusters"), std::string::npos) << r.err;
}

// The top-level handler: a library's exception (libtorch's carry a stack trace) is one
// line, an allocation failure is named as one.
TEST(Hardening, ALibraryExceptionIsOneLine) {
  std::ostringstream out, err;
  cli::Context ctx{out, err};
  struct Fake : std::exception {
    const char* what() const noexcept override {
      return "[enforce fail at alloc_cpu.cpp:75] . DefaultCPUAllocator: can't allocate memory: you tried to "
             "allocate 1099511627776 bytes.\nframe #0: c10::ThrowEnforceNotMet\nframe #1: ...\n";
    }
  };
  EXPECT_EQ(ctx.fail("train", Fake()), 1);
  EXPECT_EQ(lines(err.str()), 1) << err.str();
  EXPECT_NE(err.str().find("out of memory"), std::string::npos) << err.str();
}

// Third round (issue 49). A memory limit is read before any work: under `ulimit -v`
// below what harp-train maps just to start (was: the loader's "failed to map segment",
// exit 127), and under a cgroup's limit below what profiling the model needs (was: 47 s
// of measuring, then killed): one line naming the limit and what is needed, exit 3.
TEST(Hardening, MemoryLimitsAreReadBeforeAnyWork) {
  TempDir d;
  write(d.file("one.yaml"),
        "version: 1\nname: one\nsubclusters:\n  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}\n");
  write(d.file("job.yaml"), "version: 1\ncluster: one.yaml\nmodel: {family: gpt, preset: gpt-1.3b, granularity: 2}\n"
                            "planner: {microbatches: 8, microbatch_size: 1}\n");
  auto run_under = [&](const std::string& prefix) {
    const std::string cmd = "cd '" + d.path() + "' && " + prefix + " '" + kHarp +
                            "' profile --job job.yaml -o p.json >out.txt 2>err.txt";
    const int status = std::system(("sh -c \"" + cmd + "\"").c_str());
    return CliResult{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read(d.file("out.txt")),
                     read(d.file("err.txt"))};
  };
  CliResult r = run_under("ulimit -v 2097152 &&");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_NE(r.err.find("the address-space limit (ulimit -v) is 2 GiB"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d.file("p.json")));

  // A cgroup of 2 GiB, made for the test.
  const MemoryCgroup group(2ll << 30);
  if (group.path.empty()) GTEST_SKIP() << "no cgroup can be made here (not root?)";
  r = run_under(group.enter());
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_ONE_LINE(r);
  EXPECT_NE(r.err.find("measuring gpt-1.3b needs about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this process may use 2.0 GiB (the cgroup's memory limit)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace harp::testing
