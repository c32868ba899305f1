// The libtorch GPT and LLaMA against the model spec: layer sequence, parameter counts and
// cut sizes match it; any cut (and any granularity) reproduces the unpartitioned forward
// and backward bit for bit in float64; partial builds equal full builds; gradients agree
// with finite differences. LLaMA's forward equals an independent PyTorch implementation
// of Hugging Face's LlamaForCausalLM (llama_reference.py) on the weights we export.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "testutil/tiny_gpt.h"
#include <torch/torch.h>

#include "harp/model/model_spec.h"
#include "harp/runtime/nn/gpt.h"
#include "harp/runtime/io/hf_weights.h"

namespace harp::runtime {
namespace {

class SingleThread : public ::testing::Environment {
  void SetUp() override { torch::set_num_threads(1); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SingleThread);

// Every test runs on both families; tied is each family's default unless a test says.
class RuntimeModel : public ::testing::TestWithParam<std::string> {
 protected:
  model::ModelSpec tiny(int k, std::optional<bool> tied = std::nullopt, int blocks = 2, int hidden = 32,
                        int heads = 4, int seq = 16, int vocab = 64) const {
    return testing::tiny_model(GetParam(), k, tied.value_or(GetParam() == "gpt"), blocks, hidden, heads, seq, vocab);
  }
};
INSTANTIATE_TEST_SUITE_P(Families, RuntimeModel, ::testing::Values("gpt", "llama"),
                         [](const auto& info) { return info.param; });

torch::Tensor tokens(const model::ModelSpec& m, int batch, int seed = 7) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randint(m.gpt.vocab, {batch, m.gpt.seq_len + 1}, gen, torch::kInt64);
}

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && torch::equal(a, b);
}

// Forward (and backward) through the layers with a cut after layer i wherever cut[i]:
// the cut tensor is detached and copied, as a receiving rank would hold it. Returns the
// loss sum; parameter gradients are left in .grad().
torch::Tensor run_cut(std::vector<GptLayer>& layers, const torch::Tensor& batch,
                      const std::vector<bool>& cut, bool backward = true) {
  const auto seq = batch.size(1) - 1;
  auto inputs = batch.narrow(1, 0, seq), targets = batch.narrow(1, 1, seq);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> stages;  // (stage input leaf, output)
  torch::Tensor x = inputs, stage_in;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    x = layers[i]->forward(x);
    if (cut[i]) {
      stages.emplace_back(stage_in, x);
      stage_in = x.detach().clone().requires_grad_(true);
      x = stage_in;
    }
  }
  auto loss = layers.back()->forward(x, targets);
  if (!backward) return loss.detach();
  // Backward stage by stage from the last, sending each input's gradient upstream.
  loss.backward();
  torch::Tensor dy = stage_in.defined() ? stage_in.grad() : torch::Tensor();
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
    torch::autograd::backward({it->second}, {dy});
    if (it->first.defined()) dy = it->first.grad();
  }
  return loss.detach();
}

TEST_P(RuntimeModel, LayerSequenceMatchesSpec) {
  for (int k : {1, 2, 3, 4}) {
    const auto spec = tiny(k);
    ASSERT_EQ(spec.num_layers(), 2 + 2 * k);
    auto layers = build_gpt_layers(spec, 0, spec.num_layers(), 1, torch::kFloat64, torch::kCPU);
    ASSERT_EQ(static_cast<int>(layers.size()), spec.num_layers());
    for (int i = 0; i < spec.num_layers(); ++i) {
      const auto& l = spec.layers[i];
      EXPECT_EQ(layers[i]->layer().name, l.name);
      EXPECT_EQ(layers[i]->layer().pieces, l.pieces);
      const std::string prefix = l.kind == model::LayerKind::kHead   ? "embed."
                                 : l.kind == model::LayerKind::kTail ? "head."
                                 : "block" + std::to_string(l.block) + ".";
      std::int64_t params = 0;
      for (const auto& item : layers[i]->named_parameters(true)) {
        EXPECT_EQ(item.key().rfind(prefix, 0), 0u) << item.key() << " in layer " << l.name;
        params += item.value().numel();
      }
      // The tail's copy of the tied embedding is one parameter with the head's: the
      // spec counts it there only.
      if (auto tied = layers[i]->tied_weight(); tied.defined() && l.kind == model::LayerKind::kTail)
        params -= tied.numel();
      EXPECT_EQ(params, l.param_count) << "layer " << l.name << ", k = " << k;
    }
  }
}

TEST_P(RuntimeModel, UntiedTailOwnsItsHead) {
  const auto spec = tiny(1, /*tied=*/false);
  auto layers = build_gpt_layers(spec, 0, spec.num_layers(), 1, torch::kFloat64, torch::kCPU);
  std::int64_t params = 0;
  for (const auto& p : layers.back()->parameters()) params += p.numel();
  EXPECT_EQ(params, spec.layers.back().param_count);
  EXPECT_FALSE(layers.back()->tied_weight().defined());
  EXPECT_FALSE(torch::equal(layers.front()->named_parameters()["embed.token.weight"],
                            layers.back()->named_parameters()["head.lm.weight"]));
}

TEST_P(RuntimeModel, CutTensorsHaveSpecSizes) {
  const int batch = 3;
  for (int k : {1, 2, 3, 4}) {
    const auto spec = tiny(k);
    auto layers = build_gpt_layers(spec, 0, spec.num_layers(), 1, torch::kFloat32, torch::kCPU);
    auto t = tokens(spec, batch);
    torch::Tensor x = t.narrow(1, 0, spec.gpt.seq_len);
    for (int i = 0; i + 1 < spec.num_layers(); ++i) {
      x = layers[i]->forward(x);
      EXPECT_EQ(x.scalar_type(), torch::kFloat32);
      EXPECT_EQ(x.numel(), batch * static_cast<std::int64_t>(spec.layers[i].output_bytes) / 2)
          << "cut after " << spec.layers[i].name << ", k = " << k;
    }
    auto loss = layers.back()->forward(x, t.narrow(1, 1, spec.gpt.seq_len));
    EXPECT_EQ(loss.dim(), 0);
    // Near-uniform predictions at initialisation: about ln(V) per token.
    EXPECT_NEAR(loss.item<double>() / (batch * spec.gpt.seq_len), std::log(64.0), 0.3);
  }
}

// Changing token t changes the logits at positions >= t only (the mask's direction).
TEST_P(RuntimeModel, AttentionIsCausal) {
  const auto spec = tiny(2);
  auto layers = build_gpt_layers(spec, 0, spec.num_layers(), 2, torch::kFloat64, torch::kCPU);
  auto logits = [&](const torch::Tensor& ids) {
    torch::Tensor x = ids;
    for (auto& l : layers) x = l->forward(x);  // the tail without targets gives logits
    return x;
  };
  auto ids = tokens(spec, 1).narrow(1, 0, spec.gpt.seq_len).clone();
  auto before = logits(ids);
  ASSERT_EQ(before.sizes(), (std::vector<std::int64_t>{1, spec.gpt.seq_len, spec.gpt.vocab}));
  const int t = 9;
  ids[0][t] = (ids[0][t].item<std::int64_t>() + 1) % spec.gpt.vocab;
  auto after = logits(ids);
  EXPECT_TRUE(torch::equal(before.narrow(1, 0, t), after.narrow(1, 0, t)));
  for (int s = t; s < spec.gpt.seq_len; ++s)
    EXPECT_FALSE(torch::equal(before.select(1, s), after.select(1, s))) << "position " << s;
}

// Every cut of every granularity's sequence gives the loss and gradients of the uncut
// k = 1 model (same weights: parameter names and initialisation do not depend on k).
TEST_P(RuntimeModel, AnyCutAndGranularityMatchesFullModelBitwise) {
  const auto base_spec = tiny(1);
  auto batch = tokens(base_spec, 2);
  auto base =
      build_gpt_layers(base_spec, 0, base_spec.num_layers(), 3, torch::kFloat64, torch::kCPU);
  const auto want_loss = run_cut(base, batch, std::vector<bool>(base.size(), false));
  const auto want = named_parameters(base);

  auto check = [&](std::vector<GptLayer>& layers, const std::vector<bool>& cut,
                   const std::string& what) {
    for (auto& l : layers) l->zero_grad(/*set_to_none=*/true);
    auto loss = run_cut(layers, batch, cut);
    ASSERT_TRUE(bitwise_equal(loss, want_loss)) << what;
    auto got = named_parameters(layers);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, want[i].first) << what;
      ASSERT_TRUE(bitwise_equal(got[i].second, want[i].second)) << got[i].first << " " << what;
      ASSERT_TRUE(bitwise_equal(got[i].second.grad(), want[i].second.grad()))
          << "grad of " << got[i].first << " " << what;
    }
  };
  for (int k : {1, 2, 3, 4}) {
    const auto spec = tiny(k);
    auto layers = build_gpt_layers(spec, 0, spec.num_layers(), 3, torch::kFloat64, torch::kCPU);
    const int cuts = spec.num_layers() - 1;
    for (int mask = 0; mask < (1 << cuts); ++mask) {
      std::vector<bool> cut(layers.size(), false);
      for (int i = 0; i < cuts; ++i) cut[i] = mask >> i & 1;
      check(layers, cut, "k = " + std::to_string(k) + ", cut mask " + std::to_string(mask));
    }
  }
}

TEST_P(RuntimeModel, PartialBuildEqualsSliceOfFullBuild) {
  const auto spec = tiny(2);
  const int n = spec.num_layers();
  auto full = build_gpt_layers(spec, 0, n, 11, torch::kFloat32, torch::kCPU);
  auto full_params = named_parameters(full);
  for (int first = 0; first < n; ++first) {
    for (int last = first + 1; last <= n; ++last) {
      auto part = build_gpt_layers(spec, first, last, 11, torch::kFloat32, torch::kCPU);
      ASSERT_EQ(static_cast<int>(part.size()), last - first);
      for (int i = first; i < last; ++i) {
        auto a = part[i - first]->named_parameters(true), b = full[i]->named_parameters(true);
        ASSERT_EQ(a.size(), b.size());
        for (size_t j = 0; j < a.size(); ++j) {
          EXPECT_EQ(a[j].key(), b[j].key());
          EXPECT_TRUE(bitwise_equal(a[j].value(), b[j].value())) << a[j].key();
        }
      }
    }
  }
  // Tied: the tail's copy starts equal to the head's embedding; another seed differs.
  const auto tied = tiny(2, true);
  auto tied_full = build_gpt_layers(tied, 0, tied.num_layers(), 11, torch::kFloat32, torch::kCPU);
  EXPECT_TRUE(bitwise_equal(tied_full.front()->tied_weight(), tied_full.back()->tied_weight()));
  auto other = build_gpt_layers(tied, 0, 1, 12, torch::kFloat32, torch::kCPU);
  EXPECT_FALSE(torch::equal(other[0]->tied_weight(), tied_full.front()->tied_weight()));
  // float32 weights are the float64 draws rounded.
  auto wide = build_gpt_layers(spec, 0, n, 11, torch::kFloat64, torch::kCPU);
  auto wide_params = named_parameters(wide);
  for (size_t i = 0; i < wide_params.size(); ++i)
    EXPECT_TRUE(bitwise_equal(wide_params[i].second.to(torch::kFloat32), full_params[i].second));
}

// Central differences on a tiny float64 model; tied embeddings perturb both copies.
TEST_P(RuntimeModel, GradientsMatchFiniteDifferences) {
  for (bool tied : {false, true}) {
    const auto spec =
        tiny(4, tied, /*blocks=*/1, /*hidden=*/8, /*heads=*/2, /*seq=*/5, /*vocab=*/11);
    auto layers = build_gpt_layers(spec, 0, spec.num_layers(), 5, torch::kFloat64, torch::kCPU);
    auto batch = tokens(spec, 2);
    auto loss_of = [&] {
      torch::NoGradGuard no_grad;
      return run_cut(layers, batch, std::vector<bool>(layers.size(), false), false).item<double>();
    };
    for (auto& l : layers) l->zero_grad(true);
    {
      auto inputs = batch.narrow(1, 0, 5);
      torch::Tensor x = inputs;
      for (size_t i = 0; i + 1 < layers.size(); ++i) x = layers[i]->forward(x);
      layers.back()->forward(x, batch.narrow(1, 1, 5)).backward();
    }
    auto head_tied = layers.front()->tied_weight(), tail_tied = layers.back()->tied_weight();
    for (const auto& [name, p] : named_parameters(layers)) {
      if (tied && p.is_same(tail_tied)) continue;  // checked through the head's copy
      const bool is_tied = tied && p.is_same(head_tied);
      auto flat = p.detach().view({-1});
      for (std::int64_t e : {std::int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
        const double eps = 1e-6, saved = flat[e].item<double>();
        auto set = [&](double v) {
          flat[e].fill_(v);
          if (is_tied) tail_tied.detach().view({-1})[e].fill_(v);
        };
        set(saved + eps);
        const double up = loss_of();
        set(saved - eps);
        const double down = loss_of();
        set(saved);
        double analytic = p.grad().view({-1})[e].item<double>();
        if (is_tied) analytic += tail_tied.grad().view({-1})[e].item<double>();
        const double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
            << name << "[" << e << "], tied " << tied;
      }
    }
  }
}

// LLaMA's forward (logits and loss sum) against the independent PyTorch implementation,
// float32, on random weights exported with Hugging Face names; grouped-query attention
// (2 and 1 key/value heads) and none, LLaMA-3's rotary base, granularities 1, 2, 4 and a cut.
TEST(RuntimeLlama, ForwardMatchesThePyTorchReference) {
  const std::string python = "/usr/bin/python3";
  if (std::system((python + " -c 'import torch, numpy' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "Debian's python3-torch is not installed (make deps installs it)";
  const std::string root = std::string(HARP_BINARY_DIR) + "/runtime_llama_reference";
  std::filesystem::create_directories(root);
  struct Case {
    int heads, kv_heads;
    double theta;
    int k;
  };
  double worst_logit = 0, worst_loss = 0;
  for (const Case& c : {Case{4, 2, 1e4, 2}, Case{4, 4, 1e4, 1}, Case{4, 1, 5e5, 4}}) {
    {
      const int k = c.k;
      SCOPED_TRACE("heads " + std::to_string(c.heads) + ", kv " + std::to_string(c.kv_heads) + ", k " +
                   std::to_string(k));
      auto spec = testing::tiny_llama(k, false, 2, 32, c.heads, 16, 64, c.kv_heads);
      spec.gpt.rope_theta = c.theta;
      auto layers = build_gpt_layers(spec, 0, spec.num_layers(), 21, torch::kFloat32, torch::kCPU);
      NamedTensors params;
      for (auto& [name, p] : named_parameters(layers)) params.emplace_back(name, p.detach());
      const std::string dir = root + "/k" + std::to_string(k) + "_kv" + std::to_string(c.kv_heads);
      ASSERT_TRUE(export_hf(spec, params, dir).ok());
      auto batch = tokens(spec, 3);
      auto inputs = batch.narrow(1, 0, 16).contiguous(), targets = batch.narrow(1, 1, 16).contiguous();
      torch::NoGradGuard no_grad;
      torch::Tensor x = inputs;
      for (size_t i = 0; i + 1 < layers.size(); ++i) {
        x = layers[i]->forward(x);
        if (i == 2) x = x.clone();  // a cut
      }
      const auto logits = layers.back()->forward(x);
      const double loss = layers.back()->forward(x, targets).item<double>();
      auto write = [&](const std::string& path, const torch::Tensor& t) {
        std::ofstream(path, std::ios::binary).write(static_cast<const char*>(t.data_ptr()), t.numel() * 8);
      };
      write(dir + "/tokens.bin", inputs);
      write(dir + "/targets.bin", targets);
      const std::string cmd = python + " " + HARP_SOURCE_DIR + "/tests/runtime/llama_reference.py " + dir + " " +
                              dir + "/tokens.bin " + dir + "/targets.bin 3 16 " + dir + "/logits.bin " + dir +
                              "/loss.txt";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      auto want = torch::empty_like(logits);
      std::ifstream(dir + "/logits.bin", std::ios::binary)
          .read(static_cast<char*>(want.data_ptr()), want.numel() * 4);
      double want_loss = 0;
      std::ifstream(dir + "/loss.txt") >> want_loss;
      EXPECT_TRUE(torch::allclose(logits, want, 1e-5, 1e-5))
          << "max |diff| " << (logits - want).abs().max().item<double>();
      EXPECT_NEAR(loss, want_loss, 1e-5 * std::abs(want_loss));
      worst_logit = std::max(worst_logit, (logits - want).abs().max().item<double>() / want.abs().max().item<double>());
      worst_loss = std::max(worst_loss, std::abs(loss - want_loss) / std::abs(want_loss));
    }
  }
  std::printf("against the reference: max |logit error| / max |logit| %.3g, loss relative error %.3g\n",
              worst_logit, worst_loss);
}

}  // namespace
}  // namespace harp::runtime
