// Tokenizers for `harp data prepare`: byte level (one token per byte, vocabulary 256),
// GPT-2's byte-level BPE (vocab.json + merges.txt, or a Hugging Face tokenizer.json of
// model type BPE with a ByteLevel pre-tokenizer) and SentencePiece (a .model file, e.g.
// LLaMA-2's tokenizer.model; through Debian's libsentencepiece, harp/data/sentencepiece.h).
//
// GPT-2 BPE, as OpenAI's encoder and Hugging Face's ByteLevel compute it:
//   1. the text is split by GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (a hand-written scanner; letters and white space beyond ASCII by the C.UTF-8
//      locale's classes, numbers beyond ASCII 0-9 counted as other symbols: exact for
//      ASCII text, an approximation for non-Latin numerals);
//   2. each piece's bytes become GPT-2's printable characters (bytes_to_unicode: the 188
//      printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards);
//   3. adjacent symbols merge by the lowest-ranked pair of merges.txt until none applies;
//   4. each symbol's id is its vocab.json entry.
// Special tokens (<|endoftext|> and the added tokens of tokenizer.json) are not matched
// in the text, and no BOS/EOS is added: documents are concatenated as they are.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "harp/common/status.h"

namespace harp::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<std::uint32_t> encode(std::string_view text) const = 0;
  // The text of `ids`: decode(encode(t)) == t for byte-level and GPT-2 BPE, and for
  // SentencePiece up to its normalisation (a model trained with nmt_nfkc folds runs of
  // spaces and newlines into one space). An id outside the vocabulary decodes to U+FFFD;
  // a sequence cut inside a character leaves its bytes as they are.
  virtual std::string decode(const std::vector<std::uint32_t>& ids) const = 0;
  virtual std::int64_t vocab_size() const = 0;
  // e.g. "byte-level, vocabulary 256", "GPT-2 BPE (vocab.json), vocabulary 50257".
  virtual std::string describe() const = 0;
};

std::unique_ptr<Tokenizer> byte_tokenizer();

// GPT-2 BPE from vocab.json ({token: id}) and merges.txt (one "a b" pair per line, an
// optional "#version" first line). Errors name the file, the line or entry, and the rule.
StatusOr<std::unique_ptr<Tokenizer>> load_bpe(const std::string& vocab_json, const std::string& merges_txt);
// The same from a Hugging Face tokenizer.json (model.type BPE, model.vocab, model.merges
// as "a b" strings or [a, b] pairs; the pre-tokenizer must be ByteLevel).
StatusOr<std::unique_ptr<Tokenizer>> load_bpe_tokenizer_json(const std::string& path);
// A SentencePiece model, through the loader that harp/data/sentencepiece.h registers;
// FailedPrecondition in a program without it.
StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_path);
using SentencePieceLoader = StatusOr<std::unique_ptr<Tokenizer>> (*)(const std::string& model_path);
void register_sentencepiece(SentencePieceLoader loader);

// "byte"; a SentencePiece .model; a tokenizer.json; or a folder holding tokenizer.json,
// tokenizer.model or vocab.json with merges.txt (tried in that order).
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);

// GPT-2's printable symbol of byte b (step 2 above; UTF-8): "A" for 'A', "Ġ" for ' '.
const std::string& gpt2_byte_symbol(unsigned char b);

// GPT-2's pre-tokenization (step 1 above): the byte lengths of the pieces of `text`, in
// order; they add up to text.size(). Exposed for the tests.
std::vector<std::size_t> gpt2_pretokenize(std::string_view text);

}  // namespace harp::data
