// `harp data prepare` as a library: a text file tokenised into a token file (and the
// last fraction into a validation file) in bounded memory. The text is read and encoded
// in pieces cut after a newline that a non-space character follows (where byte-level,
// GPT-2 and SentencePiece tokenisation all start afresh, so the tokens equal those of
// the whole text: tests/unit/data/tokenizer_test.cc), and the tokens are written as they come to
// a temporary file renamed into place at the end. Peak memory is one piece's text and
// tokens, whatever the file's size (up to kMaxTextBytes); a stretch of text with no such
// newline may be at most max_uncut_bytes (kMaxUncutBytes), else the text is refused
// naming where the stretch starts: it would have to be held and encoded whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "harp/common/status.h"
#include "harp/data/token_file.h"
#include "harp/data/tokenizer.h"

namespace harp::data {

inline constexpr std::int64_t kMaxTextBytes = 1ll << 30;  // docs/file_formats.md, Limits
// The longest stretch of text without a place to cut a piece (a newline a non-space
// character follows): its tokens are held at once (4 bytes each, one per byte at worst).
inline constexpr std::int64_t kMaxUncutBytes = 64ll << 20;

struct PrepareOptions {
  std::string input;       // a regular text file, 1 byte to kMaxTextBytes
  std::string output;      // the token file (never the input; check_output_path)
  TokenFormat format = TokenFormat::kRaw16;
  double val_fraction = 0;  // the last fraction of the tokens go to val_output
  std::string val_output;
  std::int64_t piece_bytes = 16ll << 20;  // text per encode call (tests use small pieces)
  std::int64_t max_uncut_bytes = kMaxUncutBytes;  // tests use a small bound
  // Called after each piece with the bytes read so far and the file's size.
  std::function<void(std::int64_t, std::int64_t)> progress;
};

struct PrepareResult {
  std::int64_t tokens = 0;      // in the training file
  std::int64_t val_tokens = 0;  // in the validation file
};

StatusOr<PrepareResult> prepare_tokens(const Tokenizer& tokenizer, const PrepareOptions& options);

}  // namespace harp::data
