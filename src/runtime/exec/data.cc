// Token sources and deterministic batch sampling. A sample's offset is a hash of
// (seed, step, global sample index), never a draw from a shared RNG stream, so the batch
// is the same whichever rank, microbatch split or resume point asks for it.
#include "harp/runtime/exec/data.h"

#include <algorithm>

#include "harp/common/check.h"
#include "harp/data/token_file.h"

namespace harp::runtime {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class VectorSource : public TokenSource {
 public:
  VectorSource(std::vector<std::uint32_t> tokens, int vocab_limit)
      : tokens_(std::move(tokens)), vocab_limit_(vocab_limit) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(tokens_.size()); }
  std::uint32_t at(std::int64_t i) const override { return tokens_[static_cast<size_t>(i)]; }
  int vocab_limit() const override { return vocab_limit_; }

 private:
  std::vector<std::uint32_t> tokens_;
  int vocab_limit_;
};

// A token file read in place (data::MappedTokens): its size in memory is the pages the
// samples touch, not the file widened to 32 bits.
class MappedSource : public TokenSource {
 public:
  MappedSource(std::unique_ptr<data::MappedTokens> tokens, int vocab_limit)
      : tokens_(std::move(tokens)), vocab_limit_(vocab_limit) {}
  std::int64_t size() const override { return tokens_->size(); }
  std::uint32_t at(std::int64_t i) const override { return tokens_->at(i); }
  int vocab_limit() const override { return vocab_limit_; }

 private:
  std::unique_ptr<data::MappedTokens> tokens_;
  int vocab_limit_;
};

}  // namespace

StatusOr<std::unique_ptr<TokenSource>> open_token_file(const std::string& path) {
  auto tokens = data::MappedTokens::open(path);
  if (!tokens.ok()) return tokens.status();
  const std::uint32_t largest = (*tokens)->largest();
  if (largest >= (1u << 31) - 1)
    return invalid_argument(path + ": holds token id " + std::to_string(largest) + "; ids are below 2^31 - 1");
  return std::unique_ptr<TokenSource>(std::make_unique<MappedSource>(std::move(*tokens), static_cast<int>(largest) + 1));
}

std::unique_ptr<TokenSource> synthetic_tokens(std::uint64_t seed, std::int64_t tokens, int vocab) {
  HARP_CHECK(vocab >= 1 && vocab <= 65536) << "vocab " << vocab << " does not fit uint16 tokens";
  HARP_CHECK_GE(tokens, 0);
  std::vector<std::uint32_t> out(static_cast<size_t>(tokens));
  std::uint64_t state = splitmix64(seed);
  for (auto& t : out) {
    state = splitmix64(state);
    t = static_cast<std::uint32_t>(state % static_cast<std::uint64_t>(vocab));
  }
  return std::make_unique<VectorSource>(std::move(out), vocab);
}

torch::Tensor sample_tokens(const TokenSource& source, std::uint64_t seed, int step, int first,
                            int count, int seq_len) {
  HARP_CHECK_GT(source.size(), static_cast<std::int64_t>(seq_len) + 1)
      << "the token source is shorter than one sample of seq_len + 1 tokens";
  HARP_CHECK(first >= 0 && count >= 0 && step >= 0);
  // Offsets in [0, size - seq_len - 2] (the design's formula; the last token is never a
  // sample's first). The modulo bias is at most range / 2^64: negligible.
  const auto range = static_cast<std::uint64_t>(source.size() - seq_len - 1);
  auto out = torch::empty({count, seq_len + 1}, torch::kInt64);
  auto acc = out.accessor<std::int64_t, 2>();
  for (int i = 0; i < count; ++i) {
    const auto j = static_cast<std::uint64_t>(first + i);
    const std::uint64_t h =
        splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(step)) ^ j);
    const auto offset = static_cast<std::int64_t>(h % range);
    for (int k = 0; k <= seq_len; ++k) acc[i][k] = source.at(offset + k);
  }
  return out;
}

}  // namespace harp::runtime
