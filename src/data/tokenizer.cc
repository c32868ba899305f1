// Byte-level, GPT-2 BPE and SentencePiece tokenizers (see tokenizer.h).
#include "harp/data/tokenizer.h"

#include <cwctype>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include <locale.h>

#include "harp/common/document.h"


namespace harp::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD, for an id outside the vocabulary

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<std::uint32_t> encode(std::string_view text) const override {
    return std::vector<std::uint32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                      reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }
  std::string decode(const std::vector<std::uint32_t>& ids) const override {
    std::string out;
    for (std::uint32_t id : ids)
      if (id < 256) out += static_cast<char>(id);
      else out += kReplacement;
    return out;
  }
  std::int64_t vocab_size() const override { return 256; }
  std::string describe() const override { return "byte-level, vocabulary 256"; }
};

// ---- GPT-2 pre-tokenization ----

enum class Class { kLetter, kNumber, kSpace, kOther };

// One code point at `i`: its class and byte length (an invalid byte: other, length 1).
std::pair<Class, std::size_t> code_point(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return {Class::kLetter, 1};
    if (c >= '0' && c <= '9') return {Class::kNumber, 1};
    if (c == ' ' || (c >= '\t' && c <= '\r')) return {Class::kSpace, 1};
    return {Class::kOther, 1};
  }
  std::size_t n = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return {Class::kOther, 1};
  std::uint32_t cp = c & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return {Class::kOther, 1};
    cp = cp << 6 | (cc & 0x3F);
  }
  static const locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  if (utf8 == static_cast<locale_t>(nullptr)) return {Class::kLetter, n};  // no classes: letters
  const auto w = static_cast<wint_t>(cp);
  if (iswspace_l(w, utf8)) return {Class::kSpace, n};
  if (iswalpha_l(w, utf8)) return {Class::kLetter, n};
  return {Class::kOther, n};
}

// The length of the run of `cls` from i (code points of other classes end it).
std::size_t run(std::string_view s, std::size_t i, Class cls) {
  std::size_t j = i;
  while (j < s.size()) {
    const auto [c, n] = code_point(s, j);
    if (c != cls) break;
    j += n;
  }
  return j - i;
}

// The length of the piece starting at i (the pattern's alternatives in order).
std::size_t next_piece(std::string_view s, std::size_t i) {
  if (s[i] == '\'' && i + 1 < s.size()) {
    const std::string_view rest = s.substr(i + 1, 2);
    if (rest.size() == 2 && (rest == "re" || rest == "ve" || rest == "ll")) return 3;
    const char c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  }
  // " ?X+" for letters, numbers and other symbols: an optional literal space first.
  const std::size_t start = s[i] == ' ' && i + 1 < s.size() ? i + 1 : i;
  const Class cls = code_point(s, start).first;
  if (cls != Class::kSpace) return start - i + run(s, start, cls);
  // White space: \s+(?!\S) keeps the last white-space character for the next piece
  // when a non-space follows; a single one before a non-space is \s+.
  const std::size_t spaces = run(s, i, Class::kSpace);
  if (i + spaces == s.size()) return spaces;
  std::size_t last = i;  // the byte offset of the run's last code point
  for (std::size_t j = i; j < i + spaces; j += code_point(s, j).second) last = j;
  return last > i ? last - i : spaces;
}

// ---- byte-level BPE ----

// GPT-2's bytes_to_unicode, as UTF-8 strings per byte.
const std::vector<std::string>& byte_symbols() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    auto utf8 = [](std::uint32_t cp) {
      std::string out;
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
      return out;
    };
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = utf8(printable ? b : next++);
    }
    return t;
  }();
  return table;
}

class BpeTokenizer : public Tokenizer {
 public:
  BpeTokenizer(std::unordered_map<std::string, std::uint32_t> vocab,
               std::unordered_map<std::string, int> ranks, std::string source)
      : vocab_(std::move(vocab)), ranks_(std::move(ranks)), source_(std::move(source)) {
    for (const auto& [token, id] : vocab_) size_ = std::max<std::int64_t>(size_, std::int64_t{id} + 1);
    tokens_.resize(static_cast<std::size_t>(size_));
    for (const auto& [token, id] : vocab_) tokens_[id] = &token;
    for (int b = 0; b < 256; ++b) bytes_of_[byte_symbols()[b]] = static_cast<char>(b);
  }

  // Each token's symbols back to their bytes (GPT-2's byte decoder).
  std::string decode(const std::vector<std::uint32_t>& ids) const override {
    std::string out;
    for (std::uint32_t id : ids) {
      if (id >= tokens_.size() || tokens_[id] == nullptr) {
        out += kReplacement;
        continue;
      }
      const std::string& token = *tokens_[id];
      for (std::size_t k = 0; k < token.size();) {
        const auto c = static_cast<unsigned char>(token[k]);
        const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
        const auto it = bytes_of_.find(token.substr(k, len));
        out += it != bytes_of_.end() ? std::string(1, it->second) : token.substr(k, len);
        k += len;
      }
    }
    return out;
  }

  std::vector<std::uint32_t> encode(std::string_view text) const override {
    std::vector<std::uint32_t> out;
    std::unordered_map<std::string, std::vector<std::uint32_t>> cache;
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t n = next_piece(text, i);
      const std::string piece(text.substr(i, n));
      i += n;
      auto it = cache.find(piece);
      if (it == cache.end()) it = cache.emplace(piece, encode_piece(piece)).first;
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    return out;
  }
  std::int64_t vocab_size() const override { return size_; }
  std::string describe() const override {
    return "GPT-2 BPE (" + source_ + "), vocabulary " + std::to_string(size_);
  }

  // The ids of a symbol that vocab.json lacks: byte by byte (a well-formed GPT-2 vocabulary
  // holds every byte symbol, so this is for vocabularies that do not).
  Status check_bytes(const std::string& file) const {
    for (int b = 0; b < 256; ++b)
      if (!vocab_.count(byte_symbols()[b]))
        return invalid_argument(file + ": has no token for byte " + std::to_string(b) + " (\"" +
                                byte_symbols()[b] + "\"); a byte-level BPE vocabulary holds all 256 byte symbols");
    return Status();
  }

 private:
  std::vector<std::uint32_t> encode_piece(const std::string& piece) const {
    std::vector<std::string> symbols;
    for (unsigned char c : piece) symbols.push_back(byte_symbols()[c]);
    while (symbols.size() > 1) {
      int best = std::numeric_limits<int>::max();
      std::size_t at = 0;
      for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
        const auto r = ranks_.find(symbols[k] + " " + symbols[k + 1]);
        if (r != ranks_.end() && r->second < best) {
          best = r->second;
          at = k;
        }
      }
      if (best == std::numeric_limits<int>::max()) break;
      // Merge every occurrence of the best pair, left to right (OpenAI's encoder).
      const std::string a = symbols[at], b = symbols[at + 1];
      std::vector<std::string> merged;
      for (std::size_t k = 0; k < symbols.size(); ++k) {
        if (k + 1 < symbols.size() && symbols[k] == a && symbols[k + 1] == b) {
          merged.push_back(a + b);
          ++k;
        } else {
          merged.push_back(symbols[k]);
        }
      }
      symbols = std::move(merged);
    }
    std::vector<std::uint32_t> ids;
    for (const auto& s : symbols) {
      const auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        ids.push_back(it->second);
        continue;
      }
      // A merge whose result vocab.json lacks: its bytes (checked present at load).
      for (std::size_t k = 0; k < s.size();) {
        std::size_t len = 1;
        while (k + len <= s.size() && !vocab_.count(s.substr(k, len))) ++len;
        ids.push_back(vocab_.at(s.substr(k, len)));
        k += len;
      }
    }
    return ids;
  }

  std::unordered_map<std::string, std::uint32_t> vocab_;
  std::vector<const std::string*> tokens_;                // id -> its token (into vocab_'s keys)
  std::unordered_map<std::string, char> bytes_of_;        // byte symbol -> byte
  std::unordered_map<std::string, int> ranks_;
  std::string source_;
  std::int64_t size_ = 0;
};

StatusOr<std::unordered_map<std::string, std::uint32_t>> parse_vocab(const Json& vocab, const std::string& where) {
  if (!vocab.is_object()) return invalid_argument(where + ": is not an object {token: id}");
  std::unordered_map<std::string, std::uint32_t> out;
  std::unordered_map<std::uint32_t, std::string> token_of;  // ids are one-to-one: decoding needs it
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > 0x7FFFFFFF)
      return invalid_argument(where + ": token \"" + token.substr(0, 40) + "\" has id " + id.dump().substr(0, 40) +
                              "; ids are integers in [0, 2^31)");
    const auto value = static_cast<std::uint32_t>(id.get<std::int64_t>());
    if (const auto [it, fresh] = token_of.emplace(value, token); !fresh)
      return invalid_argument(where + ": tokens \"" + it->second.substr(0, 40) + "\" and \"" + token.substr(0, 40) +
                              "\" share id " + std::to_string(value) +
                              "; each id must name one token (decoding maps ids back to text); fix the vocabulary");
    out[token] = value;
  }
  if (out.empty()) return invalid_argument(where + ": is empty");
  return out;
}

// One merge "a b" (or ["a", "b"]); `where` names it in errors.
StatusOr<std::string> parse_merge(const Json& m, const std::string& where) {
  std::string a, b;
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const auto space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos)
      return invalid_argument(where + " \"" + s.substr(0, 40) + "\" is not two symbols separated by one space");
    return s;
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return m[0].get<std::string>() + " " + m[1].get<std::string>();
  return invalid_argument(where + " " + m.dump().substr(0, 40) + " is neither \"a b\" nor [\"a\", \"b\"]");
}

StatusOr<std::unique_ptr<Tokenizer>> make_bpe(std::unordered_map<std::string, std::uint32_t> vocab,
                                              std::unordered_map<std::string, int> ranks, const std::string& vocab_file,
                                              const std::string& source) {
  auto t = std::make_unique<BpeTokenizer>(std::move(vocab), std::move(ranks), source);
  HARP_RETURN_IF_ERROR(t->check_bytes(vocab_file));
  return std::unique_ptr<Tokenizer>(std::move(t));
}


}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

const std::string& gpt2_byte_symbol(unsigned char b) { return byte_symbols()[b]; }

std::vector<std::size_t> gpt2_pretokenize(std::string_view text) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = next_piece(text, i);
    out.push_back(n);
    i += n;
  }
  return out;
}

StatusOr<std::unique_ptr<Tokenizer>> load_bpe(const std::string& vocab_json, const std::string& merges_txt) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(vocab_json));
  HARP_ASSIGN_OR_RETURN(auto vocab, parse_vocab(doc, shown_path(vocab_json)));
  HARP_ASSIGN_OR_RETURN(std::string text, read_text_file(merges_txt));
  std::unordered_map<std::string, int> ranks;
  std::size_t line_no = 0, begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    HARP_ASSIGN_OR_RETURN(std::string merge,
                          parse_merge(Json(line), shown_path(merges_txt) + ": line " + std::to_string(line_no)));
    ranks.emplace(merge, static_cast<int>(ranks.size()));
  }
  return make_bpe(std::move(vocab), std::move(ranks), shown_path(vocab_json),
                  fs::path(vocab_json).filename().string() + " + " + fs::path(merges_txt).filename().string());
}

// A member of a tokenizer.json object that should be text ("" when absent), or an error
// naming `path.key` and what it holds instead.
StatusOr<std::string> text_member(const Json& object, const char* key, const std::string& path) {
  if (!object.is_object() || !object.contains(key)) return std::string();
  const Json& v = object[key];
  if (!v.is_string())
    return invalid_argument(path + "." + key + " = " + v.dump().substr(0, 60) +
                            ": must be text (a string); is it a Hugging Face tokenizer.json?");
  return v.get<std::string>();
}

// Whether a pre-tokenizer step is GPT-2's: ByteLevel with its regex (use_regex true or
// absent). Errors name a type or use_regex of the wrong kind.
StatusOr<bool> is_byte_level(const Json& step, const std::string& path) {
  HARP_ASSIGN_OR_RETURN(const std::string type, text_member(step, "type", path));
  if (type != "ByteLevel") return false;
  if (!step.contains("use_regex")) return true;
  if (!step["use_regex"].is_boolean())
    return invalid_argument(path + ".use_regex = " + step["use_regex"].dump().substr(0, 60) +
                            ": must be true or false");
  return step["use_regex"].get<bool>();
}

StatusOr<std::unique_ptr<Tokenizer>> load_bpe_tokenizer_json(const std::string& path) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(path));
  const std::string where = shown_path(path);
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object())
    return invalid_argument(where + ": has no \"model\" object; is it a Hugging Face tokenizer.json?");
  const Json& model = doc["model"];
  HARP_ASSIGN_OR_RETURN(const std::string type, text_member(model, "type", where + ": model"));
  if (type != "BPE")
    return invalid_argument(where + ": model.type is \"" + type.substr(0, 40) +
                            "\"; only BPE is read from tokenizer.json (pass a SentencePiece tokenizer.model for "
                            "Unigram models)");
  // GPT-2's pre-tokenizer: ByteLevel (alone, or the only step of a Sequence).
  const Json pre = doc.value("pre_tokenizer", Json());
  HARP_ASSIGN_OR_RETURN(bool byte_level, is_byte_level(pre, where + ": pre_tokenizer"));
  if (!byte_level && pre.is_object() && pre.value("type", Json()) == "Sequence" &&
      pre.value("pretokenizers", Json()).is_array() && pre["pretokenizers"].size() == 1) {
    HARP_ASSIGN_OR_RETURN(byte_level,
                          is_byte_level(pre["pretokenizers"][0], where + ": pre_tokenizer.pretokenizers[0]"));
  }
  if (!byte_level)
    return invalid_argument(where + ": pre_tokenizer is " + pre.dump().substr(0, 80) +
                            "; only GPT-2's (ByteLevel with its regex) is implemented; other splits (e.g. "
                            "LLaMA-3's) would tokenise differently");
  HARP_ASSIGN_OR_RETURN(auto vocab, parse_vocab(model.value("vocab", Json()), where + ": model.vocab"));
  const Json merges = model.value("merges", Json());
  if (!merges.is_array()) return invalid_argument(where + ": model.merges is not a list");
  std::unordered_map<std::string, int> ranks;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    HARP_ASSIGN_OR_RETURN(std::string merge, parse_merge(merges[i], where + ": model.merges[" + std::to_string(i) + "]"));
    ranks.emplace(merge, static_cast<int>(ranks.size()));
  }
  return make_bpe(std::move(vocab), std::move(ranks), where, fs::path(path).filename().string());
}

namespace {
SentencePieceLoader sentencepiece_loader = nullptr;
}  // namespace

void register_sentencepiece(SentencePieceLoader loader) { sentencepiece_loader = loader; }

StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_path) {
  if (sentencepiece_loader == nullptr)
    return failed_precondition(shown_path(model_path) +
                               ": this program has no SentencePiece; `harp data prepare` has it when built with "
                               "libsentencepiece-dev (make deps build)");
  std::error_code ec;
  if (!fs::is_regular_file(model_path, ec)) return not_found(shown_path(model_path) + ": no such file");
  return sentencepiece_loader(model_path);
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  if (path == "byte") return byte_tokenizer();
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string dir = path + "/";
    if (fs::exists(dir + "tokenizer.json", ec)) return load_bpe_tokenizer_json(dir + "tokenizer.json");
    if (fs::exists(dir + "tokenizer.model", ec)) return load_sentencepiece(dir + "tokenizer.model");
    if (fs::exists(dir + "vocab.json", ec) && fs::exists(dir + "merges.txt", ec))
      return load_bpe(dir + "vocab.json", dir + "merges.txt");
    return not_found(shown_path(path) + ": holds none of tokenizer.json, tokenizer.model, vocab.json + merges.txt");
  }
  if (!fs::exists(path, ec)) return not_found(shown_path(path) + ": no such file or folder");
  if (fs::path(path).extension() == ".json") return load_bpe_tokenizer_json(path);
  return load_sentencepiece(path);
}

}  // namespace harp::data
