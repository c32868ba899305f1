// Generation (runtime/generate.h): the KV-cache forward equals the training layers' over
// the whole context (two implementations); greedy decoding of an exported GPT-2 and
// LLaMA equals an independent PyTorch decode of the same Hugging Face folder
// (generate_reference.py) token for token; sampling is reproducible by seed, top-k 1 and
// temperature 0 are greedy, and the top-k / top-p / temperature draws follow their
// closed-form distributions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include <sys/wait.h>
#include <filesystem>
#include <memory>
#include <sstream>

#include "harp/data/safetensors.h"
#include "harp/runtime/generate.h"
#include "harp/runtime/io/hf_weights.h"
#include "testutil/status.h"
#include "testutil/tiny_gpt.h"

namespace harp::runtime {
namespace {

const std::string kRoot = std::string(HARP_BINARY_DIR) + "/generate_test";

NamedTensors all_params(const model::ModelSpec& m, std::uint64_t seed) {
  auto layers = build_gpt_layers(m, 0, m.num_layers(), seed, torch::kFloat32, torch::kCPU);
  NamedTensors out;
  for (auto& [name, p] : named_parameters(layers)) out.emplace_back(name, p.detach().clone());
  return out;
}

// A model whose logits spread wider than the initialisation's (weights scaled up), so that
// greedy choices are far from ties and the sampled text is not one repeated token.
NamedTensors spread_params(const model::ModelSpec& m, std::uint64_t seed) {
  NamedTensors params = all_params(m, seed);
  for (auto& [name, t] : params)
    if (name.find("norm") == std::string::npos && name.find("ln") == std::string::npos) t.mul_(8.0);
  return params;
}

model::ModelSpec model_of(const std::string& family, bool tied, int seq = 16) {
  return testing::tiny_model(family, 1, tied, /*blocks=*/2, /*hidden=*/32, /*heads=*/4, seq, /*vocab=*/64);
}

std::vector<std::int64_t> prompt_ids() { return {3, 14, 15, 9, 26, 5}; }

class GenerateModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateModel, KvCacheEqualsTheTrainingLayersOverTheWholeContext) {
  torch::set_num_threads(1);
  const auto m = model_of(GetParam(), GetParam() == "gpt");
  auto lm = LanguageModel::from_params(m, spread_params(m, 7), torch::kFloat64, torch::kCPU);
  HARP_ASSERT_OK(lm);
  // Token by token after a prefill of the prompt: every step's logits against a full forward.
  std::vector<std::int64_t> ids = prompt_ids();
  auto cache = lm->new_cache();
  torch::Tensor cached = lm->forward_cached(ids, cache);
  for (int step = 0; static_cast<int>(ids.size()) < m.gpt.seq_len; ++step) {
    const torch::Tensor full = lm->forward_full(ids);
    const double scale = full.abs().max().item<double>();
    ASSERT_GT(scale, 0.5) << "logits this small would make every comparison pass";
    EXPECT_LT((cached - full).abs().max().item<double>(), 1e-12 * scale) << "after " << ids.size() << " tokens";
    ids.push_back(full.argmax().item<std::int64_t>());
    cached = lm->forward_cached({ids.back()}, cache);
  }
  // Whole generations, past the 16-position window (where the window slides).
  for (double temperature : {0.0, 1.0}) {
    GenerateOptions o;
    o.max_new_tokens = 30;
    o.sampling.temperature = temperature;
    auto with = generate(*lm, prompt_ids(), o);
    o.use_cache = false;
    auto without = generate(*lm, prompt_ids(), o);
    HARP_ASSERT_OK(with);
    HARP_ASSERT_OK(without);
    EXPECT_EQ(with->tokens, without->tokens) << "temperature " << temperature;
    EXPECT_EQ(with->tokens.size(), 30u);
  }
}

std::string joined(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (std::int64_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

TEST_P(GenerateModel, GreedyFromAnExportEqualsAnIndependentPyTorchDecode) {
  const std::string python = "/usr/bin/python3";
  if (std::system((python + " -c 'import torch, numpy' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "Debian's python3-torch is not installed (make deps installs it)";
  torch::set_num_threads(1);
  for (bool tied : {true, false}) {
    const auto m = model_of(GetParam(), tied);
    const NamedTensors params = spread_params(m, 11);
    const std::string dir = kRoot + "/" + GetParam() + (tied ? "_tied" : "_untied");
    std::filesystem::remove_all(dir);
    HARP_ASSERT_OK(export_hf(m, params, dir));
    auto lm = LanguageModel::from_hf(dir, torch::kFloat64, torch::kCPU);
    HARP_ASSERT_OK(lm);
    EXPECT_EQ(lm->model().gpt.tied_embeddings, tied);
    GenerateOptions o;
    o.max_new_tokens = 24;  // 6 + 24 tokens: past the 16 positions
    o.sampling.temperature = 0;
    auto ours = generate(*lm, prompt_ids(), o);
    HARP_ASSERT_OK(ours);
    // A checkpoint's parameters (from_params) give the same tokens as its export.
    auto direct = LanguageModel::from_params(m, params, torch::kFloat64, torch::kCPU);
    HARP_ASSERT_OK(direct);
    auto theirs_direct = generate(*direct, prompt_ids(), o);
    HARP_ASSERT_OK(theirs_direct);
    EXPECT_EQ(theirs_direct->tokens, ours->tokens);

    const std::string cmd = python + " " + HARP_SOURCE_DIR + "/tests/runtime/generate_reference.py " + dir + " " +
                            joined(prompt_ids()) + " " + std::to_string(o.max_new_tokens);
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    ASSERT_TRUE(pipe);
    std::string out;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, pipe.get())) out += buf;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(joined(ours->tokens), out) << GetParam() << (tied ? " tied" : " untied");
    // Not one token repeated: the comparison covers varied choices.
    EXPECT_GT(std::set<std::int64_t>(ours->tokens.begin(), ours->tokens.end()).size(), 3u) << joined(ours->tokens);
  }
}

// GPT-2's own files (openai-community/gpt2) hold GPT2Model's names ("h.0.ln_1.weight",
// "wte.weight": no "transformer."), and the attention's causal-mask buffers
// ("h.0.attn.bias"): such a folder loads and generates as the export it was made from.
TEST(GenerateHf, Gpt2FilesWithoutTheTransformerPrefixLoad) {
  torch::set_num_threads(1);
  const auto m = model_of("gpt", true);
  const std::string exported = kRoot + "/gpt2_prefixed", bare = kRoot + "/gpt2_bare";
  std::filesystem::remove_all(exported);
  std::filesystem::remove_all(bare);
  HARP_ASSERT_OK(export_hf(m, spread_params(m, 13), exported));
  auto f = data::read_safetensors_header(exported + "/model.safetensors");
  HARP_ASSERT_OK(f);
  std::vector<data::SafetensorsTensor> renamed;
  for (const auto& e : f->tensors) {
    const std::string name = e.name.rfind("transformer.", 0) == 0 ? e.name.substr(12) : e.name;
    renamed.push_back({name, e.dtype, e.shape, data::read_tensor_bytes(*f, e).value()});
  }
  const std::int64_t s = m.gpt.seq_len;
  renamed.push_back({"h.0.attn.bias", "F32", {1, 1, s, s}, std::string(static_cast<size_t>(s * s * 4), '\0')});
  std::filesystem::create_directories(bare);
  HARP_ASSERT_OK(data::write_safetensors(bare + "/model.safetensors", renamed));
  std::filesystem::copy_file(exported + "/config.json", bare + "/config.json");
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.sampling.temperature = 0;
  auto a = LanguageModel::from_hf(exported, torch::kFloat64, torch::kCPU);
  auto b = LanguageModel::from_hf(bare, torch::kFloat64, torch::kCPU);
  HARP_ASSERT_OK(a);
  HARP_ASSERT_OK(b);
  EXPECT_EQ(generate(*b, prompt_ids(), o)->tokens, generate(*a, prompt_ids(), o)->tokens);
}

TEST_P(GenerateModel, SeededSamplingIsReproducibleAndTopKOneIsGreedy) {
  torch::set_num_threads(1);
  const auto m = model_of(GetParam(), false, 64);
  auto lm = LanguageModel::from_params(m, spread_params(m, 5), torch::kFloat32, torch::kCPU);
  HARP_ASSERT_OK(lm);
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.sampling = {0.0, 0, 1.0, 1};
  const auto greedy = generate(*lm, prompt_ids(), o)->tokens;
  o.sampling = {1.0, 1, 1.0, 99};  // top-k 1 at any temperature and seed
  EXPECT_EQ(generate(*lm, prompt_ids(), o)->tokens, greedy);
  o.sampling = {1.0, 0, 1e-9, 99};  // top-p keeping only the most likely token
  EXPECT_EQ(generate(*lm, prompt_ids(), o)->tokens, greedy);
  o.sampling = {1.0, 0, 1.0, 42};
  const auto first = generate(*lm, prompt_ids(), o)->tokens;
  EXPECT_EQ(generate(*lm, prompt_ids(), o)->tokens, first);
  EXPECT_NE(first, greedy);
  o.sampling.seed = 43;
  EXPECT_NE(generate(*lm, prompt_ids(), o)->tokens, first);
  // Stopping early by the callback.
  int seen = 0;
  auto stopped = generate(*lm, prompt_ids(), o, [&seen](std::int64_t) { return ++seen < 5; });
  HARP_ASSERT_OK(stopped);
  EXPECT_EQ(stopped->tokens.size(), 5u);
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateModel, ::testing::Values("gpt", "llama"));

struct CommandRun {
  int rc = 0;
  std::string out;
};

// `harp ARGS` (the built binary, which runs harp-train generate-tokens), stdout captured.
CommandRun harp(const std::string& args) {
  const std::string cmd = std::string(HARP_BINARY_DIR) + "/src/cli/harp " + args + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  CommandRun r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

// The command line end to end: the text printed is the prompt and the bytes of the tokens
// the library generates, for a model of the byte vocabulary.
TEST(GenerateCommand, PrintsThePromptAndTheLibrarysTokens) {
  torch::set_num_threads(1);
  const auto m = testing::tiny_model("llama", 1, false, 2, 32, 4, /*seq=*/64, /*vocab=*/256);
  const NamedTensors params = spread_params(m, 3);
  const std::string dir = kRoot + "/cli_model";
  std::filesystem::remove_all(dir);
  HARP_ASSERT_OK(export_hf(m, params, dir));
  const std::string prompt = "Pipeline ";
  for (const std::string sampling : {"--temperature 0", "--temperature 0.9 --top-k 20 --top-p 0.95 --seed 7"}) {
    CommandRun r = harp("generate --hf " + dir + " --prompt '" + prompt + "' --max-new-tokens 20 --threads 1 " + sampling);
    ASSERT_EQ(r.rc, 0) << sampling;
    auto lm = LanguageModel::from_hf(dir, torch::kFloat32, torch::kCPU);
    HARP_ASSERT_OK(lm);
    GenerateOptions o;
    o.max_new_tokens = 20;
    o.sampling = sampling == "--temperature 0" ? SamplingOptions{0.0, 0, 1.0, 1} : SamplingOptions{0.9, 20, 0.95, 7};
    auto want = generate(*lm, std::vector<std::int64_t>(prompt.begin(), prompt.end()), o);
    HARP_ASSERT_OK(want);
    std::string text = prompt;
    for (std::int64_t id : want->tokens) text += static_cast<char>(id);
    EXPECT_EQ(r.out, text + "\n") << sampling;
  }
  // The command line's errors: exit 2, nothing printed.
  for (const std::string& bad : std::vector<std::string>{"--prompt x", "--hf " + dir + " --checkpoint " + dir + " --prompt x",
                                "--hf " + dir, "--hf " + dir + " --prompt ''", "--hf " + dir + " --prompt x --top-p 0",
                                "--hf " + dir + " --prompt x --temperature -1", "--checkpoint " + dir + " --prompt x"}) {
    CommandRun r = harp("generate " + bad);
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_EQ(r.out, "") << bad;
  }
  CommandRun missing = harp("generate --hf " + kRoot + "/nowhere --prompt x");
  EXPECT_EQ(missing.rc, 1);
  EXPECT_EQ(missing.out, "");
}

// Draws against the closed form: frequencies within 5 standard deviations.
void expect_frequencies(const torch::Tensor& logits, const SamplingOptions& o, const std::vector<double>& want) {
  std::mt19937_64 rng(o.seed);
  const int draws = 40000;
  std::vector<int> count(want.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const std::int64_t t = sample_token(logits, o, rng);
    ASSERT_LT(t, static_cast<std::int64_t>(want.size()));
    ++count[static_cast<size_t>(t)];
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double sd = std::sqrt(want[i] * (1 - want[i]) / draws);
    EXPECT_NEAR(count[i] / double(draws), want[i], 5 * sd + 1e-12)
        << "token " << i << " (T " << o.temperature << ", top-k " << o.top_k << ", top-p " << o.top_p << ")";
  }
}

TEST(Sample, TopKTopPAndTemperatureFollowTheirClosedForms) {
  const torch::Tensor logits = torch::tensor({0.5, 0.3, 0.15, 0.05}).log();
  expect_frequencies(logits, {1.0, 0, 1.0, 1}, {0.5, 0.3, 0.15, 0.05});
  expect_frequencies(logits, {1.0, 2, 1.0, 2}, {0.625, 0.375, 0, 0});
  expect_frequencies(logits, {1.0, 0, 0.6, 3}, {0.625, 0.375, 0, 0});      // 0.5 < 0.6 <= 0.8
  expect_frequencies(logits, {1.0, 0, 0.8, 4}, {0.625, 0.375, 0, 0});      // exactly reached
  expect_frequencies(logits, {1.0, 3, 0.9, 5}, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
  // Temperature 2: p^(1/2), renormalised.
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.15) + std::sqrt(0.05);
  expect_frequencies(logits, {2.0, 0, 1.0, 6},
                     {std::sqrt(0.5) / z, std::sqrt(0.3) / z, std::sqrt(0.15) / z, std::sqrt(0.05) / z});
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample_token(torch::tensor({1.0, 3.0, 3.0, 2.0}), {0.0, 0, 1.0, 1}, rng), 1) << "the first largest";
}

// Every number of an exported config.json replaced by an extreme, and every field by a
// wrong type: loading ends in a model or an error, never an exception, and a config that
// describes a model larger than its weights is refused before it is built (the largest
// would need terabytes).
TEST(HfModel, MutatedConfigsEndInAModelOrAnError) {
  torch::set_num_threads(1);
  const std::vector<Json> extremes = {Json(0), Json(-1), Json(1), Json(3), Json(1LL << 31), Json(1LL << 40),
                                      Json(1e300), Json(0.5), Json("text"), Json(nullptr), Json::array(),
                                      Json(1048576), Json(true)};
  int cases = 0, loaded = 0;
  for (const std::string family : {"gpt", "llama"}) {
    const auto m = model_of(family, family == "gpt");
    const std::string dir = kRoot + "/mutated_" + family;
    std::filesystem::remove_all(dir);
    HARP_ASSERT_OK(export_hf(m, all_params(m, 3), dir));
    const Json config = Json::parse(std::ifstream(dir + "/config.json"));
    for (const auto& [key, value] : config.items()) {
      for (const Json& x : extremes) {
        Json bad = config;
        bad[key] = x;
        std::ofstream(dir + "/config.json") << bad.dump();
        ++cases;
        try {
          auto lm = LanguageModel::from_hf(dir, torch::kFloat32, torch::kCPU);
          if (lm.ok()) {
            ++loaded;
            EXPECT_LE(lm->model().param_count(), m.param_count() + m.gpt.vocab * m.gpt.hidden) << key << " = " << x;
          } else {
            EXPECT_FALSE(lm.status().message().empty()) << key << " = " << x;
          }
        } catch (const std::exception& e) {
          ADD_FAILURE() << key << " = " << x << " threw: " << e.what();
        }
      }
    }
  }
  std::printf("%d mutated configs, %d of them loaded\n", cases, loaded);
  EXPECT_GT(loaded, 0);
}

TEST(HfModel, ConfigFieldsHarpDoesNotComputeAreRefused) {
  const std::string dir = kRoot + "/bad_config";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir + "/config.json") << text;
    return hf_model(dir);
  };
  const std::string llama =
      R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 32,
          "rms_norm_eps": 1e-5)";
  auto ok = write(llama + "}");
  HARP_ASSERT_OK(ok);
  EXPECT_EQ(ok->gpt.kv_heads, 2);
  EXPECT_FALSE(ok->gpt.tied_embeddings);
  auto eps = write(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 32})");
  HARP_ASSERT_OK(eps);  // LlamaConfig's default epsilon, used as given
  EXPECT_EQ(eps->gpt.norm_eps, 1e-6);
  auto scaling = write(llama + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})");
  ASSERT_FALSE(scaling.ok());
  EXPECT_NE(scaling.status().message().find("rope_scaling"), std::string::npos);
  auto other = write(R"({"model_type": "bert"})");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("model_type = \"bert\": harp reads GPT2LMHeadModel"), std::string::npos)
      << other.status().message();
  auto missing = write(R"({"model_type": "gpt2", "n_embd": 64})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("n_layer: is missing"), std::string::npos) << missing.status().message();
  std::filesystem::remove(dir + "/config.json");
  EXPECT_FALSE(hf_model(dir).ok());
}

}  // namespace
}  // namespace harp::runtime
