// The GPT layer sequence against hand-computed counts: L = 2 + R·k, parameters
// 12h²R + 13hR + Vh + Sh + 2h (tied embeddings), forward FLOPs per block and sample
// s(24h² + 4sh), activations per block s(32h + 2as) (Korthikanti et al. without dropout).
#include <gtest/gtest.h>

#include "testutil/status.h"

#include <set>

#include "harp/common/fields.h"
#include "harp/model/model_spec.h"
#include "harp/model/utilisation.h"

namespace harp::model {
namespace {

std::int64_t hand_params(std::int64_t R, std::int64_t h, std::int64_t V, std::int64_t S) {
  return 12 * h * h * R + 13 * h * R + V * h + S * h + 2 * h;
}

// Model FLOPs utilisation of a GPT-2 small shape against the hand count: per token,
// 6 N over the matrix-multiplied parameters (12 h^2 per block, the LM head V h) plus
// 12 L h s for the attention core, i.e. torchtitan's 6N + 12 L h s:
//   N = 12 * 768^2 * 12 + 50257 * 768 = 123,532,032
//   per token 6 N + 12 * 12 * 768 * 1024 = 741,192,192 + 113,246,208 = 854,438,400
//   per sample (1024 tokens) 874,944,921,600
// 8 samples in 2 s on 4 devices of 312 TFLOP/s: 8 * 874,944,921,600 / (2 * 4 * 312e12).
// The first half (the embedding and blocks 0-5) on 2 of them: the head's lookup counts
// nothing, so 6 blocks' (6 * 12 h^2 * 6 + 12 * 6 * h * s) * s = 318,901,321,728 per sample.
TEST(Utilisation, MatchesTheHandCountOfGpt2Small) {
  GptConfig c;
  c.name = "gpt2-small";
  c.num_blocks = 12;
  c.hidden = 768;
  c.heads = 12;
  c.seq_len = 1024;
  c.vocab = 50257;
  auto m = build_gpt(c);
  HARP_ASSERT_OK(m);
  const double whole = model_flops(*m, 0, m->num_layers(), 8);
  EXPECT_DOUBLE_EQ(whole, 8 * 874944921600.0);
  EXPECT_NEAR(mfu(whole, 2.0, 4, 312), 8 * 874944921600.0 / (2 * 4 * 312e12), 1e-15);
  EXPECT_NEAR(mfu(whole, 2.0, 4, 312), 0.0028043106, 1e-10);
  const double first = model_flops(*m, 0, 7, 8);  // embed + blocks 0..5 (granularity 1)
  EXPECT_DOUBLE_EQ(first, 8 * 318901321728.0);
  EXPECT_NEAR(mfu(first, 2.0, 2, 312), 0.0020442392, 1e-10);
  EXPECT_EQ(mfu(first, 2.0, 2, 0), 0) << "no declared peak: no figure";
}

TEST(Gpt, LayerCountIsTwoPlusRk) {
  for (int k = 1; k <= 4; ++k) {
    auto c = gpt_preset("gpt-1.3b");
    ASSERT_TRUE(c.ok());
    c->granularity = k;
    auto m = build_gpt(*c);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->num_layers(), 2 + 24 * k);
    EXPECT_EQ(m->layers.front().kind, LayerKind::kHead);
    EXPECT_EQ(m->layers.back().kind, LayerKind::kTail);
  }
}

TEST(Gpt, Gpt13bParameterCount) {
  auto m = load_model("gpt-1.3b");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->param_count(), 1315557376);  // by hand: 12·2048²·24 + 13·2048·24 + ...
  EXPECT_EQ(m->param_count(), hand_params(24, 2048, 51200, 1024));
  // The GPT-3 paper's "1.3B" is nominal: the exact count is 1.2% above it.
  EXPECT_NEAR(m->param_count() / 1.3e9, 1.0, 0.013);
}

TEST(Gpt, EveryPresetMatchesTheFormulaAndItsNominalSize) {
  struct Nominal {
    const char* name;
    double params;
  };
  for (const Nominal& n : {Nominal{"gpt-125m", 125e6}, {"gpt-350m", 350e6}, {"gpt-760m", 760e6},
                           {"gpt-1.3b", 1.3e9}, {"gpt-2.6b", 2.6e9}, {"gpt-6.7b", 6.7e9},
                           {"gpt-15b", 15e9}, {"gpt-39b", 39e9}, {"gpt-76b", 76e9}}) {
    auto m = load_model(n.name);
    ASSERT_TRUE(m.ok()) << n.name;
    const auto& c = m->gpt;
    EXPECT_EQ(m->param_count(), hand_params(c.num_blocks, c.hidden, c.vocab, c.seq_len)) << n.name;
    // Alpa's table rounds: within 3% of the name.
    EXPECT_NEAR(m->param_count() / n.params, 1.0, 0.03) << n.name;
  }
}

TEST(Gpt, FlopsAndBytesPerBlockByHand) {
  for (int k = 1; k <= 4; ++k) {
    auto c = gpt_preset("gpt-760m");
    ASSERT_TRUE(c.ok());
    c->granularity = k;
    auto m = build_gpt(*c);
    ASSERT_TRUE(m.ok());
    const double h = 1536, s = 1024, a = 16, V = 51200;
    double block_flops = 0, block_act = 0;
    for (const auto& l : m->layers)
      if (l.block == 3) {
        block_flops += l.fwd_flops;
        block_act += l.activation_bytes;
      }
    EXPECT_DOUBLE_EQ(block_flops, s * (24 * h * h + 4 * s * h)) << "k=" << k;
    EXPECT_DOUBLE_EQ(block_act, s * (32 * h + 2 * a * s)) << "k=" << k;
    EXPECT_DOUBLE_EQ(m->layers.back().fwd_flops, 2 * h * V * s);
    // The output of a whole block (and of the embedding) is the hidden state in fp16.
    EXPECT_DOUBLE_EQ(m->layers[k].output_bytes, 2 * s * h);
    EXPECT_DOUBLE_EQ(m->layers[0].output_bytes, 2 * s * h);
  }
}

TEST(Gpt, CutInsideABlockCarriesTheResidualToo) {
  auto c = gpt_preset("gpt-760m");
  c->granularity = 4;
  auto m = build_gpt(*c);
  ASSERT_TRUE(m.ok());
  const double h = 1536, s = 1024;
  EXPECT_DOUBLE_EQ(m->layers[1].output_bytes, 2 * s * (3 * h + h));  // q, k, v + residual
  EXPECT_DOUBLE_EQ(m->layers[3].output_bytes, 2 * s * (4 * h + h));  // FC1 out + residual
}

TEST(Gpt, SignaturesRepeatPerSubLayerIndexOnly) {
  for (int k = 1; k <= 4; ++k) {
    auto c = gpt_preset("gpt-350m");
    c->granularity = k;
    auto m = build_gpt(*c);
    ASSERT_TRUE(m.ok());
    std::set<std::string> unique;
    for (const auto& l : m->layers) unique.insert(l.signature);
    EXPECT_EQ(unique.size(), static_cast<size_t>(2 + k)) << "k=" << k;
    for (const auto& l : m->layers)
      if (l.kind == LayerKind::kBlockPart) {
        EXPECT_EQ(l.signature, m->layers[1 + l.part].signature);
      }
  }
  // A different shape gives different signatures.
  auto a = load_model("gpt-350m"), b = load_model("gpt-760m");
  EXPECT_NE(a->layers[1].signature, b->layers[1].signature);
}

TEST(Gpt, ParsesExplicitHyperparameters) {
  Json j = {{"family", "gpt"}, {"num_blocks", 3}, {"hidden", 64}, {"heads", 4},
            {"seq_len", 16},   {"vocab", 100},    {"granularity", 2}};
  auto m = parse_model(j, "m.json");
  HARP_ASSERT_OK(m);
  EXPECT_EQ(m->num_layers(), 8);
  EXPECT_EQ(m->param_count(), hand_params(3, 64, 100, 16));
}

TEST(Gpt, BadInputsNameTheField) {
  struct Case {
    Json j;
    std::string path, phrase;
  };
  std::vector<Case> cases = {
      {{{"preset", "gpt-9z"}}, "model.preset", "not a known preset"},
      {{{"preset", "gpt-1.3b"}, {"granularity", 5}}, "model.granularity", "1, 2, 3 or 4"},
      {{{"num_blocks", 2}, {"hidden", 66}, {"heads", 4}}, "model.heads", "must divide hidden"},
      {{{"preset", "gpt-1.3b"}, {"family", "bert"}}, "model.family", "not one of"},
      {{{"preset", "gpt-1.3b"}, {"layers", 3}}, "model.layers", "not a known field"},
      {{{"hidden", 64}, {"heads", 4}}, "model.num_blocks", "required"},
  };
  for (const auto& c : cases) {
    auto m = parse_model(c.j, "job.yaml", "model");
    ASSERT_FALSE(m.ok()) << c.j.dump();
    EXPECT_NE(m.status().message().find(c.path), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(c.phrase), std::string::npos) << m.status().message();
  }
}

}  // namespace
}  // namespace harp::model
