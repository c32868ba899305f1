// SentencePiece tokenizers through Debian's libsentencepiece (see sentencepiece.h).
#include "harp/data/sentencepiece.h"

#include <algorithm>
#include <filesystem>

#include "harp/common/check.h"
#include "harp/common/document.h"

#if HARP_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace harp::data {
namespace {

#if HARP_WITH_SENTENCEPIECE
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD, for an id outside the vocabulary

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string path) : path_(std::move(path)) {}
  Status load() {
    const auto s = sp_.Load(path_);
    if (!s.ok()) {
      std::string why = s.ToString().substr(0, 200);
      std::replace(why.begin(), why.end(), '\n', ' ');
      return invalid_argument(shown_path(path_) + ": is not a SentencePiece model (" + why +
                              "); pass the tokenizer.model file");
    }
    return Status();
  }
  std::vector<std::uint32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto s = sp_.Encode(std::string(text), &ids);
    HARP_CHECK(s.ok()) << s.ToString();
    return std::vector<std::uint32_t>(ids.begin(), ids.end());
  }
  std::string decode(const std::vector<std::uint32_t>& ids) const override {
    // Runs of ids in the vocabulary decode together (SentencePiece joins pieces and undoes
    // byte fallback); an id outside it is U+FFFD.
    std::string out, part;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      const auto s = sp_.Decode(run, &part);
      out += s.ok() ? part : std::string(kReplacement);
      run.clear();
    };
    for (std::uint32_t id : ids) {
      if (id < static_cast<std::uint32_t>(sp_.GetPieceSize())) {
        run.push_back(static_cast<int>(id));
      } else {
        flush();
        out += kReplacement;
      }
    }
    flush();
    return out;
  }
  std::int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  std::string describe() const override {
    return "SentencePiece (" + std::filesystem::path(path_).filename().string() + "), vocabulary " +
           std::to_string(vocab_size());
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& model_path) {
  auto t = std::make_unique<SentencePieceTokenizer>(model_path);
  HARP_RETURN_IF_ERROR(t->load());
  return std::unique_ptr<Tokenizer>(std::move(t));
}
#endif

}  // namespace

bool enable_sentencepiece() {
#if HARP_WITH_SENTENCEPIECE
  register_sentencepiece(&load);
  return true;
#else
  return false;
#endif
}

}  // namespace harp::data
