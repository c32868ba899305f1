// Training data: a token file's ids (raw uint16 or llm.c uint16/uint32,
// harp/data/token_file.h) or a synthetic source, and deterministic sampling: the tokens of global sample j at step t
// depend only on (seed, t, j), so every layout and every resume sees the same batches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harp/common/status.h"

namespace harp::runtime {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::int64_t size() const = 0;           // number of tokens
  virtual std::uint32_t at(std::int64_t i) const = 0;
  virtual int vocab_limit() const = 0;             // 1 + largest token id it can return
};

// Reads a whole token file of any format (harp/data/token_file.h). Errors name the file.
StatusOr<std::unique_ptr<TokenSource>> open_token_file(const std::string& path);
// Pseudo-random tokens in [0, vocab) from `seed`, `tokens` long (for benchmarks).
std::unique_ptr<TokenSource> synthetic_tokens(std::uint64_t seed, std::int64_t tokens, int vocab);

// Samples [first, first + count) of step `step`: int64 tensor [count, seq_len + 1]
// (inputs are [:, :-1], targets [:, 1:]). REQUIRES: source.size() > seq_len + 1.
torch::Tensor sample_tokens(const TokenSource& source, std::uint64_t seed, int step,
                            int first, int count, int seq_len);

}  // namespace harp::runtime
