// Hugging Face config.json in (model/hf_config.h): the four families' released configs
// (examples/models/, written from their published values) give the published parameter
// counts exactly; every field harp does not compute is refused by name; a config written
// by hf_config_json reads back to the same model; a job names a config by `hf_config`,
// and the planner's tensor parallelism stays within what the heads split into.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harp/model/hf_config.h"
#include "harp/model/model_spec.h"
#include "testutil/status.h"
#include "testutil/temp_dir.h"

namespace harp::model {
namespace {

const std::string kModels = std::string(HARP_SOURCE_DIR) + "/examples/models/";

Json base(const std::string& arch) {
  Json j = {
      {"architectures", {arch}},  {"hidden_size", 64},       {"num_hidden_layers", 2}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}, {"intermediate_size", 96}, {"vocab_size", 128},      {"max_position_embeddings", 32}};
  return j;
}

std::string refusal(const Json& doc) {
  auto c = hf_config_from_json(doc, "config.json");
  return c.ok() ? "" : c.status().message();
}

// Parameter counts as the models' cards and transformers' num_parameters() give them.
TEST(HfConfig, ReleasedConfigsGiveThePublishedParameterCounts) {
  const std::pair<const char*, std::int64_t> models[] = {
      {"qwen2.5-7b", 7615616512}, {"qwen3-8b", 8190735360}, {"mistral-7b", 7241732096}, {"llama-3.1-8b", 8030261248}};
  for (const auto& [name, count] : models) {
    auto m = load_model(kModels + name);
    HARP_ASSERT_OK(m);
    EXPECT_EQ(m->param_count(), count) << name;
    EXPECT_EQ(m->gpt.name, name);
  }
  auto qwen2 = read_hf_config(kModels + "qwen2.5-7b");
  HARP_ASSERT_OK(qwen2);
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_EQ(qwen2->norm_eps, 1e-6);
  EXPECT_EQ(qwen2->rope_theta, 1e6);
  EXPECT_EQ(qwen2->sliding_window, 0) << "use_sliding_window is false";
  auto qwen3 = read_hf_config(kModels + "qwen3-8b/config.json");
  HARP_ASSERT_OK(qwen3);
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_EQ(qwen3->head_size(), 128);
  auto mistral = read_hf_config(kModels + "mistral-7b");
  HARP_ASSERT_OK(mistral);
  EXPECT_EQ(mistral->sliding_window, 4096);
  auto llama = read_hf_config(kModels + "llama-3.1-8b");
  HARP_ASSERT_OK(llama);
  EXPECT_EQ(llama->rope_scaling.type, "llama3");
  EXPECT_EQ(llama->rope_scaling.factor, 8.0);
  EXPECT_EQ(llama->rope_scaling.original_max_position_embeddings, 8192);
}

// What each class gives a field the file leaves out (transformers 5's defaults).
TEST(HfConfig, MissingFieldsTakeTheirClassDefaults) {
  Json qwen3 = base("Qwen3ForCausalLM");
  auto c = hf_config_from_json(qwen3, "config.json");
  HARP_ASSERT_OK(c);
  EXPECT_EQ(c->head_size(), 128) << "Qwen3Config's head_dim, whatever the hidden size";
  EXPECT_EQ(c->norm_eps, 1e-6);
  Json llama = base("LlamaForCausalLM");
  llama.erase("num_key_value_heads");
  c = hf_config_from_json(llama, "config.json");
  HARP_ASSERT_OK(c);
  EXPECT_EQ(c->kv_heads, 4);
  EXPECT_EQ(c->head_size(), 16);
  EXPECT_FALSE(c->tied_embeddings);
  Json by_type = base("x");
  by_type.erase("architectures");
  by_type["model_type"] = "mistral";
  c = hf_config_from_json(by_type, "config.json");
  HARP_ASSERT_OK(c);
  EXPECT_EQ(c->architecture, "MistralForCausalLM");
  EXPECT_EQ(c->sliding_window, 4096) << "MistralConfig's window";
}

TEST(HfConfig, WhatHarpDoesNotComputeIsRefusedByName) {
  struct Case {
    const char* arch;
    Json patch;
    const char* names;
  };
  const Case cases[] = {
      {"BertForMaskedLM", Json::object(), "architectures = [\"BertForMaskedLM\"]: harp reads GPT2LMHeadModel"},
      {"LlamaForCausalLM", {{"attention_bias", true}}, "attention_bias = true"},
      {"LlamaForCausalLM", {{"mlp_bias", true}}, "mlp_bias = true"},
      {"LlamaForCausalLM", {{"hidden_act", "gelu"}}, "hidden_act = \"gelu\""},
      {"LlamaForCausalLM", {{"attention_dropout", 0.1}}, "attention_dropout = 0.1"},
      {"LlamaForCausalLM",
       {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
       "rope_scaling.rope_type = \"yarn\""},
      {"LlamaForCausalLM",
       {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}},
       "rope_scaling.low_freq_factor"},
      {"LlamaForCausalLM",
       {{"rope_parameters", {{"rope_theta", 1e4}, {"partial_rotary_factor", 0.5}}}},
       "rope_parameters.partial_rotary_factor = 0.5"},
      {"LlamaForCausalLM", {{"sliding_window", 64}}, "sliding_window = 64: LlamaForCausalLM has no sliding window"},
      {"Qwen2ForCausalLM", {{"use_sliding_window", true}}, "use_sliding_window = true"},
      {"Qwen3ForCausalLM", {{"layer_types", {"full_attention", "sliding_attention"}}}, "layer_types = "},
      {"Qwen3ForCausalLM", {{"attention_bias", true}}, "attention_bias = true"},
      {"MistralForCausalLM", {{"num_attention_heads", 0}}, "num_attention_heads = 0: must be a positive integer"},
      {"MistralForCausalLM", {{"vocab_size", nullptr}}, "vocab_size: is missing"},
  };
  for (const Case& c : cases) {
    Json doc = base(c.arch);
    for (auto it = c.patch.begin(); it != c.patch.end(); ++it) doc[it.key()] = it.value();
    if (c.patch.contains("vocab_size")) doc.erase("vocab_size");
    const std::string m = refusal(doc);
    EXPECT_NE(m.find(c.names), std::string::npos) << c.arch << " " << c.patch.dump() << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  }
}

// hf_config_json writes what hf_config_from_json reads back, for every family.
TEST(HfConfig, WrittenConfigsReadBackToTheSameModel) {
  for (const char* name : {"qwen2.5-7b", "qwen3-8b", "mistral-7b", "llama-3.1-8b"}) {
    auto c = read_hf_config(kModels + name);
    HARP_ASSERT_OK(c);
    auto back = hf_config_from_json(hf_config_json(*c), "written");
    HARP_ASSERT_OK(back);
    back->name = c->name;
    auto a = build_gpt(*c), b = build_gpt(*back);
    HARP_ASSERT_OK(a);
    HARP_ASSERT_OK(b);
    EXPECT_EQ(model_to_json(*a), model_to_json(*b)) << name;
  }
  auto gpt = gpt_preset("gpt-125m");
  HARP_ASSERT_OK(gpt);
  auto back = hf_config_from_json(hf_config_json(*gpt), "written");
  HARP_ASSERT_OK(back);
  EXPECT_EQ(back->hidden, 768);
  EXPECT_TRUE(back->tied_embeddings);
}

// A job's model section names a config (relative to the job file), with the sequence
// and granularity it trains at; the model's JSON (in every plan) reads back the same.
TEST(HfConfig, AJobNamesAConfigAndThePlansModelReadsBack) {
  const harp::testing::TempDir tmp;
  const std::string dir = tmp.path() + "/";
  std::filesystem::create_directories(dir + "qwen");
  std::ofstream(dir + "qwen/config.json") << base("Qwen2ForCausalLM").dump();
  const Json section = {{"hf_config", "qwen"}, {"seq_len", 16}, {"granularity", 2}};
  auto m = parse_model(section, dir + "job.yaml", "model");
  HARP_ASSERT_OK(m);
  EXPECT_EQ(m->gpt.seq_len, 16);
  EXPECT_EQ(m->gpt.granularity, 2);
  EXPECT_TRUE(m->gpt.qkv_bias);
  auto again = parse_model(model_to_json(*m), "plan.json", "model_config");
  HARP_ASSERT_OK(again);
  EXPECT_EQ(again->fingerprint(), m->fingerprint());
  auto missing = parse_model(Json{{"hf_config", "nowhere"}}, dir + "job.yaml", "model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model.hf_config = \"nowhere\""), std::string::npos)
      << missing.status().message();
  // The parts belong to the llama family.
  auto gpt = parse_model(Json{{"family", "gpt"}, {"preset", "gpt-tiny"}, {"qk_norm", true}}, "job.yaml", "model");
  EXPECT_FALSE(gpt.ok());
}

TEST(HfConfig, TensorParallelismStaysWithinWhatTheHeadsSplitInto) {
  auto qwen = read_hf_config(kModels + "qwen2.5-7b");
  HARP_ASSERT_OK(qwen);
  EXPECT_EQ(max_tensor_parallel(*qwen), 4) << "28 heads, 4 key/value heads";
  auto llama = read_hf_config(kModels + "llama-3.1-8b");
  HARP_ASSERT_OK(llama);
  EXPECT_EQ(max_tensor_parallel(*llama), 8) << "32 heads, 8 key/value heads";
  auto gpt = gpt_preset("gpt-tiny");
  HARP_ASSERT_OK(gpt);
  EXPECT_EQ(max_tensor_parallel(*gpt), 4) << "4 heads";
}

}  // namespace
}  // namespace harp::model
