// Hugging Face GPT-2 and LLaMA weights in and out: what `harp export` writes is read back
// by an independent reader (Python's struct and json) with GPT-2's names and transposed
// Conv1D layout (LLaMA's names and layout are read by the PyTorch reference forward of
// runtime/gpt_test.cc); loading it gives the exported model's first loss exactly in one
// process, and the same first loss in a 3-stage plan with dp 2 in the middle (each rank
// reading only its tensors), from one file or from shards with an index; bad files are
// refused naming the tensor.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "harp/data/safetensors.h"
#include "harp/runtime/exec/data.h"
#include "harp/runtime/nn/gpt.h"
#include "harp/runtime/io/hf_weights.h"
#include "harp/runtime/generate.h"
#include "harp/data/tokenizer.h"
#include "rank_threads.h"
#include "testutil/status.h"
#include "testutil/tiny_gpt.h"

namespace harp::runtime {
namespace {

using plan::ScheduleKind;

const std::string kRoot = std::string(HARP_BINARY_DIR) + "/hf_weights_test";

NamedTensors all_params(const model::ModelSpec& m, std::uint64_t seed) {
  auto layers = build_gpt_layers(m, 0, m.num_layers(), seed, torch::kFloat32, torch::kCPU);
  NamedTensors out;
  for (auto& [name, p] : named_parameters(layers)) out.emplace_back(name, p.detach().clone());
  return out;
}

double first_loss(const model::ModelSpec& m, const plan::Plan& p, const std::string& init_from, std::uint64_t seed,
                  const std::string& name) {
  auto data = synthetic_tokens(11, 1 << 14, m.gpt.vocab);
  TrainOptions o;
  o.progress = false;
  o.steps = 1;
  o.exec.seed = seed;
  o.init_from = init_from;
  o.out_dir = kRoot + "/run_" + name;
  std::filesystem::remove_all(o.out_dir);
  return testing::train_threads(m, p, *data, o).losses.at(0);
}

TEST(HfWeights, ExportedFilesHaveGpt2NamesAndLayout) {
  torch::set_num_threads(1);
  const model::ModelSpec m = testing::tiny_gpt(2, /*tied=*/true);
  const NamedTensors params = all_params(m, 1234);
  const std::string out = kRoot + "/export_tied";
  HARP_ASSERT_OK(export_hf(m, params, out));
  auto f = data::read_safetensors_header(out + "/model.safetensors");
  HARP_ASSERT_OK(f);
  const std::int64_t h = m.gpt.hidden;
  const auto* c_attn = f->find("transformer.h.0.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (std::vector<std::int64_t>{h, 3 * h}));
  EXPECT_EQ(f->find("lm_head.weight"), nullptr);  // tied to wte, as GPT-2 files are
  EXPECT_NE(f->find("transformer.wpe.weight"), nullptr);
  auto config = load_document(out + "/config.json");
  HARP_ASSERT_OK(config);
  EXPECT_EQ((*config)["n_embd"], h);
  EXPECT_EQ((*config)["n_layer"], m.gpt.num_blocks);
  EXPECT_EQ((*config)["activation_function"], "gelu_new");

  // An independent reader: c_attn.weight[i][j] is our qkv.weight[j][i].
  torch::Tensor qkv;
  for (const auto& [name, p] : params)
    if (name == "block0.attn.qkv.weight") qkv = p;
  const std::string script = kRoot + "/check.py";
  std::ofstream(script) << "import json, struct, sys\n"
                           "raw = open(sys.argv[1], 'rb').read()\n"
                           "n = struct.unpack('<Q', raw[:8])[0]\n"
                           "h = json.loads(raw[8:8 + n])\n"
                           "e = h['transformer.h.0.attn.c_attn.weight']\n"
                           "rows, cols = e['shape']\n"
                           "b = 8 + n + e['data_offsets'][0]\n"
                           "def at(i, j): return struct.unpack('<f', raw[b + 4 * (i * cols + j):][:4])[0]\n"
                           "want = [float(x) for x in sys.argv[2:]]\n"
                           "got = [at(1, 0), at(0, 5), at(2, 7)]\n"
                           "assert got == want, (got, want)\n";
  if (std::system("python3 -c 'import json, struct' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  char args[256];
  // The float32 values as doubles, printed to round-trip exactly.
  std::snprintf(args, sizeof args, " %.17g %.17g %.17g", static_cast<double>(qkv[0][1].item<float>()),
                static_cast<double>(qkv[5][0].item<float>()),
                static_cast<double>(qkv[7][2].item<float>()));
  EXPECT_EQ(std::system(("python3 " + script + " " + out + "/model.safetensors" + args).c_str()), 0);
}

TEST(HfWeights, LoadingGivesTheExportedModelsLossInAnyLayout) {
  torch::set_num_threads(1);
  for (const std::string variant : {"gpt_tied", "gpt_untied", "llama"}) {
    SCOPED_TRACE(variant);
    const model::ModelSpec m = variant == "llama" ? testing::tiny_llama(2, false, /*blocks=*/3)
                                                  : testing::tiny_gpt(2, variant == "gpt_tied", /*blocks=*/3);
    // The seed draws both the initial weights and the batches: runs with seed 1234 see one
    // data order; the weights come from the seed or from a file.
    const std::string same = kRoot + "/w1234_" + variant;
    const std::string other = kRoot + "/w7_" + variant;
    HARP_ASSERT_OK(export_hf(m, all_params(m, 1234), same));
    HARP_ASSERT_OK(export_hf(m, all_params(m, 7), other));
    const plan::Plan one = testing::make_plan(m, {}, {1}, 4, 2, ScheduleKind::k1F1B);
    const plan::Plan three = testing::make_plan(m, {3, 6}, {1, 2, 1}, 4, 2, ScheduleKind::kHarp1F1B, {3, 2, 1});
    const double seeded = first_loss(m, one, "", 1234, "seeded");
    EXPECT_EQ(first_loss(m, one, same, 1234, "round_trip"), seeded);  // export then load is exact
    const double loaded = first_loss(m, one, other, 1234, "loaded");
    EXPECT_NE(loaded, seeded);                                        // the file decides the weights
    const double pipelined = first_loss(m, three, other + "/model.safetensors", 1234, "pipelined_" + variant);
    EXPECT_NEAR(pipelined, loaded, 1e-5 * std::abs(loaded) + 4e-5);   // and so in any layout
    // Under tensor parallelism each rank keeps its part of every full tensor.
    const plan::Plan sharded = testing::make_plan(m, {3}, {1, 1}, 4, 2, ScheduleKind::k1F1B, {}, {2, 2});
    const double tp = first_loss(m, sharded, other, 1234, "tp_" + variant);
    EXPECT_NEAR(tp, loaded, 1e-5 * std::abs(loaded) + 4e-5);
  }
}

// Half a model is not exported: a parameter missing (a checkpoint that lost a stage file,
// read through an old manifest that names no stages) or of another shape is refused, and
// nothing is written.
TEST(HfWeights, AnIncompleteSetOfWeightsIsNotExported) {
  const model::ModelSpec m = testing::tiny_gpt(2, true, /*blocks=*/2);
  NamedTensors params = all_params(m, 3);
  NamedTensors lacking(params.begin() + 1, params.end());
  Status s = export_hf(m, lacking, kRoot + "/lacking");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lacks 1 of"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(params.front().first), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(kRoot + "/lacking"));
  params.back().second = torch::zeros({3});
  s = export_hf(m, params, kRoot + "/reshaped");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("another shape"), std::string::npos) << s.message();
}

// Samples during training (--sample-every) are the model of that step: on a 3-stage plan
// with tp 2 in the middle (shards gathered), the step-4 sample in metrics.jsonl is what
// generate() gives from the step-4 checkpoint with the same seed, for GPT and LLaMA.
TEST(Sampling, DuringTrainingIsTheCheckpointedModel) {
  torch::set_num_threads(1);
  const auto tokenizer = data::byte_tokenizer();
  for (const std::string family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    const model::ModelSpec m = testing::three_block_model(2, family, /*vocab=*/256);
    const plan::Plan p = testing::make_plan(m, {3, 6}, {1, 1, 1}, 4, 2, ScheduleKind::kHarp1F1B, {}, {1, 2, 1});
    auto data = synthetic_tokens(5, 1 << 14, m.gpt.vocab);
    TrainOptions o;
    o.progress = false;
    o.steps = 4;
    o.exec.seed = 77;
    o.exec.optim.lr = 3e-2;
    o.checkpoint_every = 4;
    o.async_checkpoints = false;
    o.out_dir = kRoot + "/sampling_" + family;
    o.sample_tokenizer = tokenizer.get();
    o.sample_every = 2;
    o.sample_prompt = "Stage ";
    o.sample_tokens = 12;
    std::filesystem::remove_all(o.out_dir);
    testing::train_threads(m, p, *data, o);
    std::map<int, std::string> samples;
    std::ifstream in(o.out_dir + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      if (j.contains("sample")) samples[j["sample_after_steps"].get<int>()] = j["sample"].get<std::string>();
    }
    ASSERT_EQ(samples.size(), 2u);
    long long optimizer_steps = 0;
    auto tensors = read_checkpoint(o.out_dir + "/checkpoints", 4, &optimizer_steps);
    HARP_ASSERT_OK(tensors);
    auto lm = LanguageModel::from_params(m, *tensors, torch::kFloat32, torch::kCPU);
    HARP_ASSERT_OK(lm);
    GenerateOptions g;
    g.max_new_tokens = 12;
    g.sampling.seed = 77 * 1000003ULL + 4;
    auto want = generate(*lm, {'S', 't', 'a', 'g', 'e', ' '}, g);
    HARP_ASSERT_OK(want);
    std::string text = "Stage ";
    for (std::int64_t id : want->tokens) text += static_cast<char>(id);
    // metrics.jsonl replaces invalid UTF-8 (a byte-level sample may cut a character).
    const std::string shown = Json::parse(Json(text).dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
    EXPECT_EQ(samples[4], shown);
    EXPECT_EQ(samples[2].rfind("Stage ", 0), 0u);
  }
}

TEST(HfWeights, ShardsWithAnIndexLoadAsOneFile) {
  torch::set_num_threads(1);
  const model::ModelSpec m = testing::tiny_gpt(2, /*tied=*/true);
  const std::string whole = kRoot + "/whole";
  HARP_ASSERT_OK(export_hf(m, all_params(m, 1234), whole));
  auto f = data::read_safetensors_header(whole + "/model.safetensors");
  HARP_ASSERT_OK(f);
  const std::string dir = kRoot + "/sharded";
  std::filesystem::create_directories(dir);
  std::vector<data::SafetensorsTensor> shard[2];
  Json map = Json::object();
  for (size_t i = 0; i < f->tensors.size(); ++i) {
    const auto& e = f->tensors[i];
    data::SafetensorsTensor t{e.name, e.dtype, e.shape, data::read_tensor_bytes(*f, e).value()};
    const int k = i % 2;
    map[e.name] = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
    shard[k].push_back(std::move(t));
  }
  for (int k = 0; k < 2; ++k)
    HARP_ASSERT_OK(data::write_safetensors(dir + "/model-0000" + std::to_string(k + 1) + "-of-00002.safetensors",
                                           shard[k]));
  std::ofstream(dir + "/model.safetensors.index.json") << Json({{"metadata", Json::object()}, {"weight_map", map}}).dump();
  const plan::Plan one = testing::make_plan(m, {}, {1}, 2, 1, ScheduleKind::k1F1B);
  EXPECT_EQ(first_loss(m, one, dir, 99, "sharded"), first_loss(m, one, whole, 99, "whole"));
}

TEST(HfWeights, BadCheckpointsAreRefusedNamingTheTensor) {
  torch::set_num_threads(1);
  const model::ModelSpec m = testing::tiny_gpt(2, /*tied=*/true);
  const plan::Plan one = testing::make_plan(m, {}, {1}, 2, 1, ScheduleKind::k1F1B);
  auto data = synthetic_tokens(11, 1 << 14, m.gpt.vocab);
  auto errors_of = [&](const std::string& path) {
    TrainOptions o;
    o.progress = false;
    o.steps = 1;
    o.init_from = path;
    o.out_dir = kRoot + "/bad";
    std::filesystem::remove_all(o.out_dir);
    auto e = testing::train_threads_errors(m, one, *data, o);
    return e.at(0);
  };
  // Another vocabulary.
  const model::ModelSpec wide = testing::tiny_gpt(2, true, 2, 32, 4, 16, /*vocab=*/80);
  HARP_ASSERT_OK(export_hf(wide, all_params(wide, 1), kRoot + "/wide"));
  std::string e = errors_of(kRoot + "/wide");
  EXPECT_NE(e.find("tensor transformer.wte.weight is [80, 32] but the model's embed.token.weight is [64, 32]; "
                   "set the model's vocab to 80"),
            std::string::npos)
      << e;
  // A tensor left out.
  HARP_ASSERT_OK(export_hf(m, all_params(m, 1), kRoot + "/full"));
  auto f = data::read_safetensors_header(kRoot + "/full/model.safetensors");
  HARP_ASSERT_OK(f);
  std::vector<data::SafetensorsTensor> kept;
  for (const auto& t : f->tensors)
    if (t.name != "transformer.ln_f.bias")
      kept.push_back({t.name, t.dtype, t.shape, data::read_tensor_bytes(*f, t).value()});
  HARP_ASSERT_OK(data::write_safetensors(kRoot + "/partial.safetensors", kept));
  e = errors_of(kRoot + "/partial.safetensors");
  EXPECT_NE(e.find("has no tensor transformer.ln_f.bias"), std::string::npos) << e;
  EXPECT_NE(errors_of(kRoot + "/nothing_here").find("no such file"), std::string::npos);
  // A GPT-2 file given to a LLaMA.
  const model::ModelSpec llama = testing::tiny_llama(2);
  const plan::Plan llama_plan = testing::make_plan(llama, {}, {1}, 2, 1, ScheduleKind::k1F1B);
  TrainOptions o;
  o.progress = false;
  o.steps = 1;
  o.init_from = kRoot + "/full";
  o.out_dir = kRoot + "/bad_llama";
  std::filesystem::remove_all(o.out_dir);
  e = testing::train_threads_errors(llama, llama_plan, *data, o).at(0);
  EXPECT_NE(e.find("has no tensor model.embed_tokens.weight; is it a LLaMA (LlamaForCausalLM) checkpoint?"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace harp::runtime
