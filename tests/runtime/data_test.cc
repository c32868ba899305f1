// Token sources and sampling: a batch is a function of (seed, step, sample index) only,
// so splitting it into microbatches or ranks changes nothing.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "testutil/status.h"
#include <torch/torch.h>

#include "harp/data/token_file.h"
#include "harp/runtime/exec/data.h"

namespace harp::runtime {
namespace {

class SingleThread : public ::testing::Environment {
  void SetUp() override { torch::set_num_threads(1); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SingleThread);

// Token i is i: every sampled row shows where it starts.
class CountingSource : public TokenSource {
 public:
  explicit CountingSource(std::int64_t size) : size_(size) {}
  std::int64_t size() const override { return size_; }
  std::uint32_t at(std::int64_t i) const override { return static_cast<std::uint16_t>(i); }
  int vocab_limit() const override { return static_cast<int>(size_); }

 private:
  std::int64_t size_;
};

TEST(RuntimeData, SamplingIsDeterministicAndSplitInvariant) {
  CountingSource source(1000);
  auto whole = sample_tokens(source, 42, 3, 0, 8, 16);
  EXPECT_EQ(whole.scalar_type(), torch::kInt64);
  EXPECT_EQ(whole.sizes(), (std::vector<std::int64_t>{8, 17}));
  EXPECT_TRUE(torch::equal(whole, sample_tokens(source, 42, 3, 0, 8, 16)));
  auto halves = torch::cat(
      {sample_tokens(source, 42, 3, 0, 4, 16), sample_tokens(source, 42, 3, 4, 4, 16)});
  EXPECT_TRUE(torch::equal(whole, halves));
  std::vector<torch::Tensor> singles;
  for (int j = 0; j < 8; ++j) singles.push_back(sample_tokens(source, 42, 3, j, 1, 16));
  EXPECT_TRUE(torch::equal(whole, torch::cat(singles)));
  // Other steps and seeds draw other samples.
  EXPECT_FALSE(torch::equal(whole, sample_tokens(source, 42, 4, 0, 8, 16)));
  EXPECT_FALSE(torch::equal(whole, sample_tokens(source, 43, 3, 0, 8, 16)));
}

TEST(RuntimeData, RowsAreContiguousWindowsInRange) {
  const std::int64_t size = 40;
  const int seq = 16;
  CountingSource source(size);
  auto rows = sample_tokens(source, 1, 0, 0, 500, seq);
  std::set<std::int64_t> starts;
  for (int i = 0; i < rows.size(0); ++i) {
    const auto start = rows[i][0].item<std::int64_t>();
    starts.insert(start);
    EXPECT_LE(start, size - seq - 2);
    for (int k = 0; k <= seq; ++k) ASSERT_EQ(rows[i][k].item<std::int64_t>(), start + k);
  }
  // 500 draws over 22 possible offsets reach every one of them.
  EXPECT_EQ(static_cast<std::int64_t>(starts.size()), size - seq - 1);
}

TEST(RuntimeData, SyntheticSourceIsInRangeAndSeeded) {
  auto a = synthetic_tokens(9, 5000, 50);
  auto b = synthetic_tokens(9, 5000, 50);
  auto c = synthetic_tokens(10, 5000, 50);
  ASSERT_EQ(a->size(), 5000);
  EXPECT_EQ(a->vocab_limit(), 50);
  std::set<int> seen;
  bool differs = false;
  for (std::int64_t i = 0; i < a->size(); ++i) {
    ASSERT_LT(a->at(i), 50);
    ASSERT_EQ(a->at(i), b->at(i));
    differs |= a->at(i) != c->at(i);
    seen.insert(a->at(i));
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(seen.size(), 50u);
}

TEST(RuntimeData, TokenFileRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("harp_runtime_data_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokens.bin").string();
  std::vector<std::uint16_t> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back(static_cast<std::uint16_t>((i * 37) % 300));
  ASSERT_TRUE(data::write_token_file(tokens, path).ok());
  auto source = open_token_file(path);
  HARP_ASSERT_OK(source);
  EXPECT_EQ((*source)->size(), 100);
  EXPECT_EQ((*source)->vocab_limit(), 1 + *std::max_element(tokens.begin(), tokens.end()));
  for (int i = 0; i < 100; ++i) EXPECT_EQ((*source)->at(i), tokens[i]);

  auto missing = open_token_file((dir / "missing.bin").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.bin"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace harp::runtime
