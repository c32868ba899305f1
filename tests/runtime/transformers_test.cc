// harp against Hugging Face transformers itself (the version the Makefile pins into
// .venv): for every family harp reads (GPT-2, LLaMA, LLaMA 3.1's rope scaling, Qwen2's q/k/v
// biases with tied embeddings, Qwen3's q/k norm and head_dim, Mistral's sliding window), a
// tiny random model that transformers builds and saves (transformers_reference.py) loads
// into harp's training layers and gives transformers' logits, loss and every gradient of
// one step within 1e-5 of their largest magnitude in float32; harp generates its greedy
// tokens, with the KV cache and without; and harp's export of the model loads back into
// transformers with the same logits. Nothing is downloaded.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "harp/common/document.h"
#include "harp/data/safetensors.h"
#include "harp/runtime/generate.h"
#include "harp/runtime/io/hf_weights.h"
#include "harp/runtime/nn/gpt.h"
#include "testutil/status.h"
#include "testutil/temp_dir.h"

namespace harp::runtime {
namespace {

const std::string kPython = std::string(HARP_SOURCE_DIR) + "/.venv/bin/python";
const std::string kScript = std::string(HARP_SOURCE_DIR) + "/tests/runtime/transformers_reference.py";
constexpr int kSeq = 16;
constexpr double kTolerance = 1e-5;

// Runs a command; returns its standard output, failing the test on a non-zero exit.
std::string run(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return "";
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << command << "\n" << out;
  return out;
}

// The tensors of a safetensors file by name (float32 and int64).
std::map<std::string, torch::Tensor> load_tensors(const std::string& path) {
  std::map<std::string, torch::Tensor> out;
  auto file = data::read_safetensors_header(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return out;
  for (const auto& e : file->tensors) {
    auto bytes = data::read_tensor_bytes(*file, e);
    EXPECT_TRUE(bytes.ok());
    const auto dtype = e.dtype == "I64" ? torch::kInt64 : torch::kFloat32;
    out[e.name] = torch::from_blob(bytes->data(), e.shape, torch::TensorOptions().dtype(dtype)).clone();
  }
  return out;
}

double relative(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max() /
          want.to(torch::kFloat64).abs().max().clamp_min(1e-30))
      .item<double>();
}

class Transformers : public ::testing::TestWithParam<std::string> {};

TEST_P(Transformers, LogitsGradientsGenerationAndExportAreTransformers) {
  const std::string family = GetParam();
  torch::set_num_threads(1);
  const harp::testing::TempDir tmp;
  const std::string dir = tmp.path(), hf = dir + "/hf";
  run(kPython + " " + kScript + " make " + family + " " + dir);
  auto ref = load_tensors(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.count("logits") && ref.count("input_ids"));
  HARP_ASSERT_OK_AND_ASSIGN(const model::ModelSpec m, hf_model(hf));

  // The training layers from the saved weights.
  std::vector<GptLayer> layers = build_gpt_layers(m, 0, m.num_layers(), 1, torch::kFloat32, torch::kCPU);
  std::map<std::string, Shard> shards;
  for (const auto& layer : layers) shards.insert(layer->shards().begin(), layer->shards().end());
  const auto params = named_parameters(layers);
  HARP_ASSERT_OK(load_hf_params(m, hf, params, [&](const std::string& n) -> const Shard& { return shards.at(n); }));
  const torch::Tensor ids = ref["input_ids"];
  const torch::Tensor inputs = ids.narrow(1, 0, kSeq), targets = ids.narrow(1, 1, kSeq);
  {
    torch::NoGradGuard no_grad;
    torch::Tensor x = inputs;
    for (auto& layer : layers) x = layer->forward(x);  // the tail without targets: logits
    const double e = relative(x, ref["logits"]);
    std::printf("%s: logits within %.2e of transformers' largest\n", family.c_str(), e);
    EXPECT_LE(e, kTolerance);
  }
  torch::Tensor x = inputs;
  for (size_t i = 0; i + 1 < layers.size(); ++i) x = layers[i]->forward(x);
  const torch::Tensor loss = layers.back()->forward(x, targets);
  EXPECT_LE(relative(loss.reshape({1}), ref["loss"]), kTolerance);
  loss.backward();
  std::map<std::string, torch::Tensor> grads;  // by Hugging Face name, a tied pair summed
  for (const auto& [name, p] : params) {
    const HfName n = hf_name(name, m);
    ASSERT_FALSE(n.name.empty()) << name;
    torch::Tensor g = n.transposed ? p.grad().t() : p.grad();
    grads[n.name] = grads.count(n.name) ? grads[n.name] + g : g;
  }
  double worst = 0;
  int compared = 0;
  for (const auto& [key, want] : ref) {
    if (key.rfind("grad.", 0) != 0) continue;
    const std::string name = key.substr(5);
    ASSERT_TRUE(grads.count(name)) << "harp has no parameter for " << name;
    const double e = relative(grads[name], want);
    EXPECT_LE(e, kTolerance) << name;
    worst = std::max(worst, e);
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(grads.size())) << "every parameter of harp's is one of transformers'";
  std::printf("%s: %d gradients within %.2e\n", family.c_str(), compared, worst);

  // Greedy generation, cached and not.
  const Json gen = Json::parse(std::ifstream(dir + "/generated.json"));
  const std::vector<std::int64_t> prompt = gen["prompt"], want = gen["generated"];
  HARP_ASSERT_OK_AND_ASSIGN(const LanguageModel lm, LanguageModel::from_hf(hf, torch::kFloat32, torch::kCPU));
  GenerateOptions o;
  o.max_new_tokens = static_cast<int>(want.size());
  o.sampling.temperature = 0;
  for (bool cache : {true, false}) {
    o.use_cache = cache;
    HARP_ASSERT_OK_AND_ASSIGN(const GenerateResult got, generate(lm, prompt, o));
    EXPECT_EQ(got.tokens, want) << (cache ? "with" : "without") << " the KV cache";
  }

  // harp's export reads back into transformers with the same logits: in one file, and in
  // shards of 40 KB with an index (as save_pretrained writes a large model); both read
  // back into harp too.
  for (std::int64_t shard : {kHfShardBytes, std::int64_t{40000}}) {
    const std::string out_dir = dir + "/exported_" + std::to_string(shard);
    HARP_ASSERT_OK(export_hf(m, params, out_dir, shard));
    EXPECT_EQ(std::filesystem::exists(out_dir + "/model.safetensors.index.json"), shard < kHfShardBytes);
    const std::string out = run(kPython + " " + kScript + " check " + out_dir + " " + dir);
    const double e = std::stod(out.substr(out.find_last_of('\n', out.size() - 2) + 1));
    std::printf("%s: the export's logits in transformers within %.2e (%s)\n", family.c_str(), e,
                shard < kHfShardBytes ? "sharded" : "one file");
    EXPECT_LE(e, kTolerance);
    std::vector<GptLayer> back = build_gpt_layers(m, 0, m.num_layers(), 1, torch::kFloat32, torch::kCPU);
    std::map<std::string, Shard> back_shards;
    for (const auto& layer : back) back_shards.insert(layer->shards().begin(), layer->shards().end());
    const auto back_params = named_parameters(back);
    HARP_ASSERT_OK(load_hf_params(m, out_dir, back_params,
                                  [&](const std::string& n) -> const Shard& { return back_shards.at(n); }));
    ASSERT_EQ(back_params.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::equal(back_params[i].second, params[i].second)) << params[i].first;
  }
}

// The released configs in examples/models/: harp's parameter count is transformers'
// num_parameters() exactly.
TEST(TransformersCount, ReleasedConfigsHaveTransformersParameterCounts) {
  for (const char* name : {"qwen2.5-7b", "qwen3-8b", "mistral-7b", "llama-3.1-8b"}) {
    const std::string folder = std::string(HARP_SOURCE_DIR) + "/examples/models/" + name;
    const std::string out = run(kPython + " " + kScript + " count " + folder);
    HARP_ASSERT_OK_AND_ASSIGN(const model::ModelSpec m, model::load_model(folder));
    const std::int64_t theirs = std::stoll(out.substr(out.find_last_of('\n', out.size() - 2) + 1));
    std::printf("%s: harp %lld, transformers %lld parameters\n", name, static_cast<long long>(m.param_count()),
                static_cast<long long>(theirs));
    EXPECT_EQ(m.param_count(), theirs) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Transformers,
                         ::testing::Values("gpt2", "llama", "llama31", "qwen2", "qwen3", "mistral"));

}  // namespace
}  // namespace harp::runtime
