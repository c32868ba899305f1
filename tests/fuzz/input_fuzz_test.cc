// Seeded fuzzing of every input HARP parses (STYLE habit 20 for issue "hardening"):
// cluster, model, job, plan, cost table, profile DB, trace, tokenizer and token files, file kinds,
// and command-line extremes. Each case is a valid file mutated once — truncated, a value
// replaced by a wrong type or an extreme number, deep nesting, a YAML alias (bomb or
// self-reference), invalid UTF-8, a flipped byte — run through the `harp` command line
// in process. Every case must end with a documented exit code, a one-line message when
// it fails, no internal error, and within a time bound; the whole run within a memory
// bound. A crash fails the test binary. The seed is printed; HARP_FUZZ_SEED replays one.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/data/safetensors.h"
#include "harp/data/sentencepiece.h"
#include "harp/data/token_file.h"
#include "harp/data/tokenizer.h"
#include "harp/launch/worker_env.h"
#include "testutil/cpu_time.h"
#include "testutil/files.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

const std::string kSource = HARP_SOURCE_DIR;


// The values a mutation puts in place of a number or a string.
const std::vector<std::string> kExtremes = {
    "2147483648", "4294967297", "-2147483649", "9223372036854775808", "-1", "0", "1e99999", "-1e99999",
    "1e-400", "0.5", "nan", ".nan", ".inf", "-.inf", std::string(5000, '9'), "\"text\"", "[]", "{}", "null",
    "true", "1e308", "100000000", "65536", "1048576", "1e-300", "-0.0", "4294967296", "1e300"};

struct Mutator {
  std::mt19937_64 rng;
  std::string pick(const std::vector<std::string>& v) { return v[rng() % v.size()]; }
  size_t at(size_t n) { return n == 0 ? 0 : rng() % n; }

  // Replaces the k-th number in the text.
  std::string replace_number(const std::string& s) {
    std::vector<std::pair<size_t, size_t>> spans;
    for (size_t i = 0; i < s.size();) {
      if ((std::isdigit(static_cast<unsigned char>(s[i])) != 0) && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
        size_t j = i;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == 'e' || s[j] == '-')) ++j;
        spans.emplace_back(i, j - i);
        i = j;
      } else {
        ++i;
      }
    }
    if (spans.empty()) return s + pick(kExtremes);
    auto [i, n] = spans[at(spans.size())];
    return s.substr(0, i) + pick(kExtremes) + s.substr(i + n);
  }

  std::string mutate(const std::string& s, bool yaml) {
    switch (rng() % 11) {
      case 0: return s.substr(0, at(s.size()));                                    // truncation
      case 1: case 2: case 3: return replace_number(s);                             // extreme numbers
      case 4: {                                                                     // invalid UTF-8
        std::string t = s;
        t.insert(at(t.size()), std::string(1, static_cast<char>(0xc3 + (rng() % 2) * 0x3c)) + "\xff");
        return t;
      }
      case 5: {                                                                     // deep nesting
        const int depth = rng() % 2 ? 70 : 100000;
        const std::string deep = std::string(depth, '[') + std::string(depth, ']');
        return yaml ? s + "\nextra: " + deep + "\n" : s.substr(0, s.rfind('}')) + ", \"extra\": " + deep + "}";
      }
      case 6:                                                                       // aliases
        if (yaml) {
          if (rng() % 2) return s + "\nself: &x [*x]\n";
          std::string bomb = "\nb0: &b0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
          for (int k = 1; k < 9; ++k)
            bomb += "b" + std::to_string(k) + ": &b" + std::to_string(k) + " [" +
                    [&] { std::string r; for (int j = 0; j < 10; ++j) r += (j ? ", *b" : "*b") + std::to_string(k - 1); return r; }() + "]\n";
          return s + bomb;
        }
        return replace_number(s);
      case 9:                                                                       // a key twice
        if (yaml) {
          const size_t colon = s.find(':', at(s.size()));
          const size_t start = colon == std::string::npos ? std::string::npos : s.rfind('\n', colon);
          if (start != std::string::npos && colon > start + 1)
            return s + "\n" + s.substr(start + 1, colon - start - 1) + ": 1\n";
        }
        return replace_number(s);
      case 10:                                                                      // a second document
        return yaml ? s + "\n---\n" + s.substr(0, at(s.size())) : replace_number(s);
      case 7: {                                                                     // a flipped byte
        std::string t = s;
        if (!t.empty()) t[at(t.size())] = static_cast<char>(rng() % 256);
        return t;
      }
      default: {                                                                    // wrong type
        const size_t colon = s.find(':', at(s.size()));
        if (colon == std::string::npos) return s;
        const size_t end = s.find_first_of(",\n}", colon);
        return s.substr(0, colon + 1) + " " + pick({"[1, 2]", "{\"a\": 1}", "\"x\"", "null", "-3"}) +
               (end == std::string::npos ? "" : s.substr(end));
      }
    }
  }
};

struct Outcome {
  int cases = 0;
  std::map<std::string, int> per_class;
  double slowest_s = 0;
  std::string slowest;
};

// Runs one case and checks the rules: bounded CPU time (5 s; a wall-clock bound failed at
// 5.09 s on a busy 2-core machine), and a wall-clock bound only
// against hangs (60 s: a hang spends no CPU).
void check_case(const std::string& cls, const std::vector<std::string>& args, Outcome* o) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_s();
  CliResult r = run_harp(args);
  const double secs = process_cpu_s() - cpu_start;
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++o->cases;
  ++o->per_class[cls];
  if (secs > o->slowest_s) {
    o->slowest_s = secs;
    o->slowest = cls + ": " + args[0] + " " + (args.size() > 1 ? args[1] : "");
  }
  std::string cmd;
  for (const auto& a : args) cmd += a.substr(0, 80) + " ";
  SCOPED_TRACE(cls + ": harp " + cmd);
  EXPECT_TRUE(r.rc == 0 || r.rc == 1 || r.rc == 2 || r.rc == 3) << "exit code " << r.rc;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_LT(secs, 5.0) << "bounded CPU time";
  EXPECT_LT(wall_s, 60.0) << "no hang";
  if (r.rc != 0 && r.rc != 3) {
    EXPECT_FALSE(r.err.empty()) << "a failure says why";
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err.substr(0, 2000);
    EXPECT_LT(r.err.size(), 2000u) << "a readable line";
  }
}

std::uint64_t seed() {
  const char* s = std::getenv("HARP_FUZZ_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 20261201;
}

TEST(InputFuzz, EveryParserEndsWithADocumentedExitAndOneLine) {
  TempDir dir;
  Mutator m{std::mt19937_64(seed())};
  std::cout << "fuzz seed " << seed() << " (HARP_FUZZ_SEED replays it)\n";
  Outcome o;
  const std::string cluster = read(kSource + "/examples/clusters/cpu_hetero.yaml");
  const std::string paper = read(kSource + "/examples/clusters/paper_v100_a100.yaml");
  const std::string model = read(kSource + "/examples/models/gpt_small_cpu.json");
  const std::string plan = read(kSource + "/examples/plans/slow_link.json");
  const std::string costs = read(kSource + "/examples/costs/opt350_sailor_mbs4.json");
  const std::string sailor_cluster = kSource + "/examples/clusters/a100_v100_sailor.yaml";
  const std::string job = "version: 1\ncluster: cluster.yaml\nmodel: {family: gpt, preset: gpt-tiny, granularity: 2}\n"
                          "planner: {strategy: harp, microbatches: 8, microbatch_size: 4}\n"
                          "training: {steps: 5, lr: 0.01}\n";
  write(dir.file("cluster.yaml"), cluster);
  // A profile DB and a trace to mutate.
  const std::string profile =
      R"({"version": 1, "entries": [{"device": "cpu", "signature": "x", "layer": "embed", "microbatch_size": 4, )"
      R"("tp": 1, "fwd_s": 0.001, "bwd_s": 0.002, "activation_bytes": 1000, "output_bytes": 100, )"
      R"("param_bytes": 10, "workspace_bytes": 0, "source": "measured"}]})";
  ASSERT_EQ(run_harp({"simulate", "--plan", kSource + "/examples/plans/slow_link.json", "--trace", dir.file("t.json")}).rc, 0);
  const std::string trace = read(dir.file("t.json"));

  for (int i = 0; i < 90; ++i) {
    write(dir.file("c.yaml"), m.mutate(i % 2 ? cluster : paper, true));
    check_case("cluster", {"cluster", "show", dir.file("c.yaml")}, &o);
  }
  for (int i = 0; i < 80; ++i) {
    const bool yaml = i % 2 == 0;
    write(dir.file(yaml ? "m.yaml" : "m.json"), m.mutate(model, yaml));
    check_case("model", {"model", "show", dir.file(yaml ? "m.yaml" : "m.json")}, &o);
  }
  for (int i = 0; i < 80; ++i) {
    write(dir.file("job.yaml"), m.mutate(job, true));
    check_case("job", {"plan", "--job", dir.file("job.yaml")}, &o);
  }
  for (int i = 0; i < 90; ++i) {
    write(dir.file("p.json"), m.mutate(plan, false));
    check_case("plan", {"simulate", "--plan", dir.file("p.json"), "--svg", dir.file("p.svg")}, &o);
  }
  for (int i = 0; i < 60; ++i) {
    write(dir.file("costs.json"), m.mutate(costs, false));
    check_case("cost table", {"plan", "--cluster", sailor_cluster, "--costs", dir.file("costs.json"),
                              "--microbatches", "8"}, &o);
  }
  write(dir.file("job_ok.yaml"), job);
  for (int i = 0; i < 50; ++i) {
    write(dir.file("db.json"), m.mutate(profile, false));
    check_case("profile DB", {"plan", "--job", dir.file("job_ok.yaml"), "--profile", dir.file("db.json")}, &o);
  }
  // Profile DBs with device records through merge, and Sailor (Metis-format) files
  // through import.
  const std::string devices_db =
      R"({"version": 1, "devices": [{"device": "cpu", "machine": "m", "dtype": "float32", "threads": 1, )"
      R"("emulated_slowdown": 2, "optimizer_s_per_param_byte": 4e-9}], "entries": [{"device": "cpu", )"
      R"("signature": "x", "microbatch_size": 2, "fwd_s": 0.001, "bwd_s": 0.002, "fwd_spread": 0.01, "repeats": 5}]})";
  for (int i = 0; i < 40; ++i) {
    write(dir.file("d.json"), m.mutate(devices_db, false));
    check_case("profile merge", {"profile", "merge", dir.file("d.json"), dir.file("d.json"), "-o", dir.file("dm.json")},
               &o);
  }
  const std::string sailor = read(std::string(HARP_TEST_DATA_DIR) + "/sailor/OPT-350/A100-40/mbs1_tmp1.json");
  std::filesystem::create_directories(dir.file("sailor/A100-40"));
  for (int i = 0; i < 40; ++i) {
    write(dir.file("sailor/A100-40/mbs1_tmp1.json"), m.mutate(sailor, false));
    check_case("profile import", {"profile", "import", "--format", "sailor", dir.file("sailor"), "--job",
                                  kSource + "/examples/jobs/opt350_sailor.yaml", "-o", dir.file("imp.json")},
               &o);
  }
  for (int i = 0; i < 50; ++i) {
    write(dir.file("tm.json"), m.mutate(trace, false));
    check_case("trace", {"trace", "compare", dir.file("t.json"), dir.file("tm.json")}, &o);
  }
  // The testbed's commands as printed (--dry-run touches nothing), and run summaries.
  for (int i = 0; i < 30; ++i) {
    write(dir.file("tb.yaml"), m.mutate(cluster, true));
    check_case("testbed", {"testbed", "up", "--dry-run", "--cluster", dir.file("tb.yaml")}, &o);
  }
  for (const char* prefix : {"", "UPPER", "a-b", "../x", "harp0123456789012345678901"})
    check_case("testbed", {"testbed", "up", "--dry-run", "--cluster", dir.file("cluster.yaml"), "--prefix", prefix}, &o);
  const std::string summary = R"({"strategy": "uniform", "schedule": "1f1b", "planned_schedule": "1f1b", )"
                              R"("stages": 2, "predicted_s": 0.5, "measured_median_s": 0.6})";
  std::filesystem::create_directories(dir.file("run"));
  for (int i = 0; i < 30; ++i) {
    write(dir.file("run/summary.json"), m.mutate(summary, false));
    check_case("trace runs", {"trace", "runs", dir.file("run"), dir.file("run")}, &o);
  }
  // Tokenizers (harp data prepare --tokenizer): a small BPE tokenizer.json, vocab.json +
  // merges.txt and SentencePiece models, mutated or random.
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[data::gpt2_byte_symbol(static_cast<unsigned char>(b))] = b;
  vocab["ab"] = 256;
  const std::string tokenizer_json =
      Json({{"pre_tokenizer", {{"type", "ByteLevel"}}}, {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}}})
          .dump();
  write(dir.file("corpus.txt"), "ab ab abc\n");
  std::filesystem::create_directories(dir.file("bpe"));
  data::enable_sentencepiece();
  for (int i = 0; i < 60; ++i) {
    const std::vector<std::string> prepare = {"data", "prepare", "--input", dir.file("corpus.txt"), "--output",
                                              dir.file("corpus.bin"), "--tokenizer"};
    auto with = [&](const std::string& tokenizer) {
      std::vector<std::string> args = prepare;
      args.push_back(tokenizer);
      return args;
    };
    write(dir.file("tokenizer.json"), m.mutate(tokenizer_json, false));
    check_case("tokenizer", with(dir.file("tokenizer.json")), &o);
    write(dir.file("bpe/vocab.json"), i % 2 ? m.mutate(vocab.dump(), false) : vocab.dump());
    write(dir.file("bpe/merges.txt"), i % 2 ? "#version: 0.2\na b\n" : m.mutate("#version: 0.2\na b\n", true));
    check_case("tokenizer", with(dir.file("bpe")), &o);
    std::string junk(m.at(256), '\0');
    for (auto& c : junk) c = static_cast<char>(m.rng() % 256);
    write(dir.file("sp.model"), junk);
    check_case("tokenizer", with(dir.file("sp.model")), &o);
  }
  // File kinds, for every reader.
  mkfifo(dir.file("fifo").c_str(), 0644);
  symlink(dir.file("loop_b").c_str(), dir.file("loop_a").c_str());
  symlink(dir.file("loop_a").c_str(), dir.file("loop_b").c_str());
  for (const std::string& f : {dir.path(), dir.file("fifo"), std::string("/dev/zero"), dir.file("loop_a"),
                               dir.file("missing.yaml"), std::string(5000, 'a')})
    for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
             {"cluster", "show", f}, {"model", "show", f}, {"plan", "--job", f}, {"simulate", "--plan", f},
             {"plan", "--cluster", sailor_cluster, "--costs", f, "--microbatches", "4"},
             {"plan", "--job", dir.file("job_ok.yaml"), "--profile", f}, {"trace", "compare", f, f},
             {"data", "prepare", "--input", f, "--output", dir.file("out.bin")},
             {"testbed", "up", "--dry-run", "--cluster", f}, {"trace", "runs", f}})
      check_case("file kinds", cmd, &o);
  // Command-line extremes.
  for (const auto& [s, b] : std::vector<std::pair<std::string, std::string>>{
           {"4096", "1048576"}, {"4097", "2"}, {"0", "1"}, {"2", "0"}, {"-1", "3"}, {"3", "99999999999"},
           {"abc", "2"}, {"1e3", "4"}, {"64", "65536"}, {"8", "8"}})
    for (const char* kind : {"gpipe", "1f1b"}) check_case("flags", {"schedule", "show", "--stages", s, "--microbatches", b, "--kind", kind}, &o);
  for (const char* v : {"0", "-1", "abc", "1e9", "99999999999999999999", "auto"})
    check_case("flags", {"plan", "--job", dir.file("job_ok.yaml"), "--microbatches", v}, &o);
  // Output paths: every writer refuses inputs, devices, folders, FIFOs and names no file
  // can have, and writes regular files under long (valid) names.
  write(dir.file("in.txt"), "ab ab abc\n");
  for (const std::string& out :
       {dir.file("in.txt"), std::string("/dev/stdout"), std::string("/dev/null"), dir.file("fifo"), dir.path(),
        dir.file(std::string(255, 'o')), dir.file(std::string(256, 'o')), dir.file("missing_folder/x.bin"),
        dir.path() + "/.", std::string("")}) {
    check_case("output paths", {"data", "prepare", "--input", dir.file("in.txt"), "--output", out}, &o);
    EXPECT_EQ(read(dir.file("in.txt")), "ab ab abc\n") << "the input survives --output " << out.substr(0, 80);
  }
  write(dir.file("p_in.json"), plan);
  for (const std::string& out : {std::string("/dev/null"), dir.path(), dir.file(std::string(255, 'q')),
                                 dir.file(std::string(256, 'q'))}) {
    check_case("output paths", {"plan", "--job", dir.file("job_ok.yaml"), "--output", out}, &o);
    check_case("output paths", {"simulate", "--plan", dir.file("p_in.json"), "--svg", out}, &o);
  }
  check_case("output paths", {"plan", "--job", dir.file("job_ok.yaml"), "--output", dir.file("job_ok.yaml")}, &o);
  check_case("output paths", {"simulate", "--plan", dir.file("p_in.json"), "--svg", dir.file("p_in.json")}, &o);
  EXPECT_EQ(read(dir.file("p_in.json")), plan) << "simulate never writes over its plan";
  EXPECT_EQ(read(dir.file("job_ok.yaml")), job) << "plan never writes over its job";
  // Flags: numbers the project's validators read whole and in range.
  for (const char* v : {"nan", "inf", "-1", "1e-9", "1e30", "0x10", "1x", "", " 5", "99999999999999999999"}) {
    check_case("flags", {"launch", "--grace-s", v, "--nproc", "1", "--", "true"}, &o);
    check_case("flags", {"data", "prepare", "--input", dir.file("in.txt"), "--output", dir.file("o.bin"),
                         "--val-fraction", v}, &o);
    check_case("flags", {"schedule", "show", "--stages", v, "--microbatches", "4"}, &o);
  }
  // Sizes at the documented limits (docs/file_formats.md, Limits) and one past each: at
  // the limit the input is taken, past it refused in one line, both within the time bound.
  {
    auto at_limit = [&](const std::string& name, const std::string& file, int want_at, int want_past,
                        const std::string& at, const std::string& past) {
      write(dir.file(file), at);
      ++o.cases, ++o.per_class["sizes at limits"];
      EXPECT_EQ(run_harp({"cluster", "show", dir.file(file)}).rc, want_at) << name << " at the limit";
      write(dir.file(file), past);
      check_case("sizes at limits", {"cluster", "show", dir.file(file)}, &o);
      EXPECT_EQ(run_harp({"cluster", "show", dir.file(file)}).rc, want_past) << name << " past the limit";
    };
    const std::string one = "version: 1\nname: x\nsubclusters:\n  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}\n";
    std::string padding(static_cast<size_t>(kMaxDocumentBytes) - one.size() - 2, 'p');
    at_limit("file size", "big.yaml", 0, 1, one + "#" + padding + "\n", one + "#" + padding + "pp\n");
    auto subclusters = [](int n, int nodes, int last_nodes = 0) {
      std::string t = "version: 1\nname: x\nsubclusters:\n";
      for (int i = 0; i < n; ++i)
        t += "  - {name: s" + std::to_string(i) + ", device: cpu, nodes: " +
             std::to_string(i + 1 == n && last_nodes > 0 ? last_nodes : nodes) +
             ", devices_per_node: 1, inter_node: {bandwidth_gbps: 10, latency_us: 5}}\n";
      t += "links:\n";
      for (int i = 0; i + 1 < n; ++i)
        t += "  - {between: [s" + std::to_string(i) + ", s" + std::to_string(i + 1) + "], bandwidth_gbps: 1}\n";
      return t;
    };
    at_limit("subclusters", "subs.yaml", 0, 1, subclusters(1024, 2), subclusters(1025, 2));
    at_limit("devices", "devs.yaml", 0, 1, subclusters(2, 32768), subclusters(2, 32768, 32769));
  }
  // The environment a launcher hands a worker: every variable read whole or refused in one line.
  {
    const std::vector<std::string> names = {"RANK",
                                            "WORLD_SIZE",
                                            "LOCAL_RANK",
                                            "LOCAL_WORLD_SIZE",
                                            "GROUP_RANK",
                                            "GROUP_WORLD_SIZE",
                                            "MASTER_PORT",
                                            "TORCHELASTIC_RESTART_COUNT",
                                            "HARP_CLOCK_ORIGIN_NS",
                                            "HARP_EMULATE",
                                            "HARP_STORE_FILE"};
    for (int i = 0; i < 120; ++i) {
      std::map<std::string, std::string> env;
      for (int k = 0; k < 3; ++k) env[names[m.rng() % names.size()]] = m.pick(kExtremes);
      if (m.rng() % 4 == 0) env["HARP_STORE_FILE"] = dir.path();
      auto parsed = launch::WorkerEnv::from([&](const char* n) -> const char* {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
      });
      ++o.cases;
      ++o.per_class["environment"];
      if (parsed.ok()) {
        EXPECT_GE(parsed->rank, 0);
        EXPECT_LT(parsed->rank, parsed->world_size);
      } else {
        EXPECT_EQ(std::count(parsed.status().message().begin(), parsed.status().message().end(), '\n'), 0);
        EXPECT_LT(parsed.status().message().size(), 600u);
      }
    }
  }

  // The torch-free readers called directly: each case counted, an error in one line.
  auto reader_case = [&o](const char* cls, const Status& s) {
    ++o.cases;
    ++o.per_class[cls];
    if (!s.ok()) {
      EXPECT_EQ(std::count(s.message().begin(), s.message().end(), '\n'), 0) << s.message();
    }
  };
  // Token files (read by harp train; the reader itself here, torch-free).
  for (int i = 0; i < 20; ++i) {
    std::string bytes(m.at(64), '\0');
    for (auto& c : bytes) c = static_cast<char>(m.rng() % 256);
    write(dir.file("tok.bin"), bytes);
    reader_case("token file", data::read_token_file(dir.file("tok.bin")).status());
  }
  // llm.c headers: a valid uint16 and uint32 file, mutated byte by byte.
  for (const auto format : {data::TokenFormat::kLlmc16, data::TokenFormat::kLlmc32}) {
    ASSERT_TRUE(data::write_tokens({1, 2, 3, 4}, format, dir.file("llmc.bin")).ok());
    const std::string good = read(dir.file("llmc.bin"));
    for (int i = 0; i < 20; ++i) {
      std::string bytes = good;
      bytes[m.rng() % 12] = static_cast<char>(m.rng() % 256);
      if (i % 4 == 0) bytes.resize(m.rng() % bytes.size());
      write(dir.file("tok.bin"), bytes);
      reader_case("token file", data::read_tokens(dir.file("tok.bin")).status());
    }
  }
  // safetensors headers: a valid file, its header text and length mutated.
  ASSERT_TRUE(data::write_safetensors(dir.file("ok.safetensors"),
                                      {{"a.weight", "F32", {2, 2}, std::string(16, '\1')},
                                       {"b", "BF16", {3}, std::string(6, '\2')}}).ok());
  {
    const std::string good = read(dir.file("ok.safetensors"));
    for (int i = 0; i < 60; ++i) {
      std::string bytes = good;
      if (i % 3 == 0) {
        bytes[m.rng() % 8] = static_cast<char>(m.rng() % 256);  // the length
      } else {
        const std::string mutated = m.mutate(good.substr(8, good.size() - 8 - 22), false);
        bytes = good.substr(0, 8) + mutated + good.substr(good.size() - 22);
      }
      write(dir.file("m.safetensors"), bytes);
      auto r = data::read_safetensors_header(dir.file("m.safetensors"));
      reader_case("safetensors", r.status());
      if (r.ok()) {
        for (const auto& t : r->tensors) EXPECT_TRUE(data::read_tensor_bytes(*r, t).ok()) << t.name;
      }
    }
  }
  for (const std::string& f : {dir.file("fifo"), std::string("/dev/zero"), dir.file("loop_a"), dir.path()}) {
    auto r = data::read_token_file(f);
    ++o.cases;
    ++o.per_class["token file"];
    EXPECT_FALSE(r.ok()) << f;
    EXPECT_FALSE(data::read_safetensors_header(f).ok()) << f;
  }

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::cout << o.cases << " cases:";
  for (const auto& [cls, n] : o.per_class) std::cout << " " << cls << " " << n << ";";
  std::cout << "\nslowest " << o.slowest_s << " CPU s (" << o.slowest << "); peak memory " << ru.ru_maxrss / 1024
            << " MiB\n";
  EXPECT_GE(o.cases, 500);
  EXPECT_LT(ru.ru_maxrss, 1536L * 1024) << "peak memory of the whole run, KiB";
}

}  // namespace
}  // namespace harp::testing
