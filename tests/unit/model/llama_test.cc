// The LLaMA family in the model spec, against independent figures: the published
// parameter counts of every preset (exact), FLOPs per block and token by hand
// (2(h(h + 2kv) + h² + 3hf) + 4sh), the layer sequence (L = 2 + R·k, k + 2 unique
// signatures), and the model section's rules (Meta's ffn rule, GQA, untied, family).
#include <gtest/gtest.h>

#include "testutil/status.h"

#include <set>

#include "harp/common/document.h"
#include "harp/model/model_spec.h"

namespace harp::model {
namespace {

TEST(Llama, PresetParameterCountsAreThePublishedOnes) {
  const std::vector<std::pair<std::string, std::int64_t>> published = {
      {"llama-2-7b", 6738415616LL}, {"llama-2-13b", 13015864320LL}, {"llama-2-70b", 68976648192LL},
      {"llama-3-8b", 8030261248LL}, {"llama-3-70b", 70553706496LL}};
  for (const auto& [name, params] : published) {
    auto m = load_model(name);
    HARP_ASSERT_OK(m);
    EXPECT_EQ(m->family, "llama") << name;
    EXPECT_FALSE(m->gpt.tied_embeddings) << name;
    EXPECT_EQ(m->param_count(), params) << name;
  }
}

TEST(Llama, FlopsPerBlockFollowTheClosedForm) {
  for (const char* name : {"llama-2-7b", "llama-3-8b", "llama-2-70b"}) {
    for (int k = 1; k <= 4; ++k) {
      auto m = load_model(name, k);
      HARP_ASSERT_OK(m);
      const auto& c = m->gpt;
      const double h = c.hidden, s = c.seq_len, f = c.ffn_hidden, kv = c.kv_heads * (h / c.heads);
      const double per_token = 2 * (h * (h + 2 * kv) + h * h + 3 * h * f) + 4 * s * h;
      double block0 = 0;
      for (const auto& l : m->layers)
        if (l.block == 0) block0 += l.fwd_flops;
      EXPECT_DOUBLE_EQ(block0, per_token * s) << name << " k=" << k;
      EXPECT_EQ(m->num_layers(), 2 + c.num_blocks * k);
      std::set<std::string> sigs;
      for (const auto& l : m->layers) sigs.insert(l.signature);
      EXPECT_EQ(static_cast<int>(sigs.size()), k + 2) << name << " k=" << k;
      // Every layer but the tail hands on fp16 activations of its declared shape.
      for (size_t i = 0; i + 1 < m->layers.size(); ++i) {
        const auto& shape = m->layers[i].output_shape;
        ASSERT_EQ(shape.size(), 2u);
        EXPECT_EQ(m->layers[i].output_bytes, 2.0 * shape[0] * shape[1]);
      }
    }
  }
  // Grouped-query attention is a different layer from full attention (and cheaper).
  auto gqa = load_model("llama-3-8b", 4);  // layer 1 = attn_in: RMSNorm + q, k, v
  HARP_ASSERT_OK(gqa);
  auto doc = parse_yaml_text("{preset: llama-3-8b, kv_heads: 32, granularity: 4}", "m.yaml");
  HARP_ASSERT_OK(doc);
  auto mha = parse_model(*doc, "m.yaml");
  HARP_ASSERT_OK(mha);
  EXPECT_NE(gqa->layers[1].signature, mha->layers[1].signature);
  EXPECT_LT(gqa->layers[1].fwd_flops, mha->layers[1].fwd_flops);
  EXPECT_LT(gqa->layers[1].output_bytes, mha->layers[1].output_bytes);  // k and v are narrower
}

TEST(Llama, ModelSectionRules) {
  auto parse = [](const std::string& yaml) {
    auto doc = parse_yaml_text(yaml, "m.yaml");
    EXPECT_TRUE(doc.ok());
    return parse_model(*doc, "m.yaml");
  };
  auto custom = parse("{family: llama, num_blocks: 2, hidden: 4096, heads: 32, seq_len: 128, vocab: 32000}");
  HARP_ASSERT_OK(custom);
  EXPECT_EQ(custom->gpt.ffn_hidden, 11008);  // Meta's rule: 8h/3 rounded up to 256
  EXPECT_EQ(custom->gpt.kv_heads, 32);
  EXPECT_FALSE(custom->gpt.tied_embeddings);
  EXPECT_EQ(model_to_json(*custom)["kv_heads"], 32);

  auto bad_kv = parse("{family: llama, num_blocks: 2, hidden: 64, heads: 4, kv_heads: 3, vocab: 256}");
  ASSERT_FALSE(bad_kv.ok());
  EXPECT_NE(bad_kv.status().message().find("kv_heads"), std::string::npos) << bad_kv.status().message();
  EXPECT_NE(bad_kv.status().message().find("must divide heads (4)"), std::string::npos);

  auto mismatch = parse("{family: gpt, preset: llama-2-7b}");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("does not match the preset llama-2-7b (family llama)"),
            std::string::npos)
      << mismatch.status().message();

  auto theta = parse("{family: llama, num_blocks: 1, hidden: 64, heads: 4, vocab: 256, rope_theta: -1}");
  ASSERT_FALSE(theta.ok());
  EXPECT_NE(theta.status().message().find("rope_theta"), std::string::npos);

  // GPT's JSON has no LLaMA fields, so the fingerprints of existing plans stay valid.
  auto gpt = load_model("gpt-1.3b");
  HARP_ASSERT_OK(gpt);
  EXPECT_FALSE(model_to_json(*gpt).contains("kv_heads"));
  EXPECT_EQ(gpt->family, "gpt");
}

}  // namespace
}  // namespace harp::model
