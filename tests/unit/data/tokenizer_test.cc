// Tokenizers against independent references: GPT-2's pre-tokenization against Python's
// re on random ASCII text and hand-checked cases; byte-level BPE against a Python
// implementation of OpenAI's encoder on merges it learned (tokenizer_reference.py), from
// vocab.json + merges.txt and from a tokenizer.json; SentencePiece against
// python3-sentencepiece on a model it trained. Bad tokenizer files are refused naming
// the file and the entry.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "harp/common/document.h"
#include "harp/data/prepare.h"
#include "harp/data/sentencepiece.h"
#include "harp/data/tokenizer.h"
#include "testutil/status.h"

namespace harp::data {
namespace {

const std::string kRoot = std::string(HARP_BINARY_DIR) + "/tokenizer_test";
const std::string kPython = "/usr/bin/python3";
const std::string kScript = std::string(HARP_SOURCE_DIR) + "/tests/unit/data/tokenizer_reference.py";

std::string dir(const std::string& name) {
  const std::string d = kRoot + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

bool have_python(const std::string& modules) {
  return std::system((kPython + " -c 'import " + modules + "' > /dev/null 2>&1").c_str()) == 0;
}

// English-like text with contractions, numbers, punctuation, runs of spaces and newlines.
std::string sample_text(int words, unsigned seed) {
  static const char* const kWords[] = {"the", "The", "pipeline", "stage", "GPU", "isn't", "we'll", "they're",
                                       "I'm", "you've", "it'd", "3", "1024", "2.6B", "(dp)", "--", "x=1;",
                                       "hello", "world", "HARP", "a100", "v100", "slow", "link", "'quoted'"};
  static const char* const kGaps[] = {" ", " ", " ", "  ", "\n", "\n\n", " \n", "\t", "   ", ", ", ". "};
  std::mt19937 gen(seed);
  std::string out;
  for (int i = 0; i < words; ++i) {
    out += kWords[gen() % (sizeof kWords / sizeof *kWords)];
    out += kGaps[gen() % (sizeof kGaps / sizeof *kGaps)];
  }
  return out;
}

std::vector<std::size_t> lengths(const std::vector<std::string>& pieces) {
  std::vector<std::size_t> out;
  for (const auto& p : pieces) out.push_back(p.size());
  return out;
}

TEST(Gpt2Pretokenize, HandCheckedCases) {
  EXPECT_EQ(gpt2_pretokenize("Hello world"), lengths({"Hello", " world"}));
  EXPECT_EQ(gpt2_pretokenize("I'm here's"), lengths({"I", "'m", " here", "'s"}));
  EXPECT_EQ(gpt2_pretokenize("a   b"), lengths({"a", "  ", " b"}));       // \s+(?!\S) leaves one space
  EXPECT_EQ(gpt2_pretokenize("a\n\nb"), lengths({"a", "\n", "\n", "b"}));  // a newline is no " ?"
  EXPECT_EQ(gpt2_pretokenize("x  "), lengths({"x", "  "}));                // trailing spaces: one piece
  EXPECT_EQ(gpt2_pretokenize("GPT-2 costs $100!!"), lengths({"GPT", "-", "2", " costs", " $", "100", "!!"}));
  EXPECT_EQ(gpt2_pretokenize("we'll they're"), lengths({"we", "'ll", " they", "'re"}));
  EXPECT_EQ(gpt2_pretokenize("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87"),  // "café 中文": letters beyond ASCII
            lengths({"caf\xc3\xa9", " \xe4\xb8\xad\xe6\x96\x87"}));
  EXPECT_TRUE(gpt2_pretokenize("").empty());
}

TEST(Gpt2Pretokenize, MatchesPythonsRegexOnAsciiText) {
  if (!have_python("json, re")) GTEST_SKIP() << "no " << kPython;
  const std::string d = dir("pretok");
  for (unsigned seed : {1u, 2u, 3u}) {
    const std::string text = sample_text(400, seed);
    std::ofstream(d + "/text.txt", std::ios::binary) << text;
    ASSERT_EQ(std::system((kPython + " " + kScript + " pretok " + d + "/text.txt " + d + "/want.json").c_str()), 0);
    auto want = load_document(d + "/want.json");
    HARP_ASSERT_OK(want);
    EXPECT_EQ(gpt2_pretokenize(text), want->get<std::vector<std::size_t>>()) << "seed " << seed;
  }
}

TEST(Bpe, HandCheckedMerges) {
  const std::string d = dir("hand");
  // Byte symbols: printable ASCII maps to itself, the space to "Ġ" (U+0120), the
  // newline to "Ċ" (U+010A); the whole table is checked by the Python encoder's test.
  const std::string bytes_to_unicode_space = "\xc4\xa0";  // Ġ
  EXPECT_EQ(gpt2_byte_symbol(' '), bytes_to_unicode_space);
  EXPECT_EQ(gpt2_byte_symbol('\n'), "\xc4\x8a");
  EXPECT_EQ(gpt2_byte_symbol('A'), "A");
  EXPECT_EQ(gpt2_byte_symbol(0xE9), "\xc3\xa9");  // printable Latin-1 maps to itself
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_byte_symbol(static_cast<unsigned char>(b))] = b;
  ASSERT_EQ(vocab.size(), 256u);
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab[bytes_to_unicode_space + "w"] = 260;
  vocab[bytes_to_unicode_space + "wo"] = 261;
  std::ofstream(d + "/vocab.json") << vocab.dump();
  std::ofstream(d + "/merges.txt") << "#version: 0.2\nh e\nl l\nhe ll\nhell o\n" << bytes_to_unicode_space
                                   << " w\n" << bytes_to_unicode_space << "w o\n";
  auto t = load_tokenizer(d);
  HARP_ASSERT_OK(t);
  EXPECT_EQ((*t)->vocab_size(), 262);
  // "hello" merges fully; " world" -> "Ġwo" + r + l + d; "ll" alone; the "\n" byte is 10.
  EXPECT_EQ((*t)->encode("hello world\nll"),
            (std::vector<std::uint32_t>{259, 261, 'r', 'l', 'd', 10, 257}));
  EXPECT_EQ((*t)->describe(), "GPT-2 BPE (vocab.json + merges.txt), vocabulary 262");
}

TEST(Bpe, MatchesAPythonEncoderOnLearnedMerges) {
  if (!have_python("json, re")) GTEST_SKIP() << "no " << kPython;
  const std::string d = dir("learned");
  const std::string text = sample_text(3000, 7) + "caf\xc3\xa9 na\xc3\xafve\n";
  std::ofstream(d + "/text.txt", std::ios::binary) << text;
  ASSERT_EQ(std::system((kPython + " " + kScript + " bpe " + d + "/text.txt 300 " + d).c_str()), 0);
  auto want = load_document(d + "/ids.json");
  HARP_ASSERT_OK(want);
  auto files = load_bpe(d + "/vocab.json", d + "/merges.txt");
  HARP_ASSERT_OK(files);
  const auto got = (*files)->encode(text);
  EXPECT_EQ(got, want->get<std::vector<std::uint32_t>>());
  EXPECT_LT(got.size(), text.size() / 2);  // the merges compress: not byte by byte
  // The same tokenizer as a Hugging Face tokenizer.json (merges as "a b" and as pairs).
  auto vocab = load_document(d + "/vocab.json");
  HARP_ASSERT_OK(vocab);
  auto merges = read_text_file(d + "/merges.txt");
  HARP_ASSERT_OK(merges);
  Json list = Json::array(), pairs = Json::array();
  std::istringstream lines(*merges);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#version", 0) == 0) continue;
    list.push_back(line);
    pairs.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  for (const Json& m : {list, pairs}) {
    Json doc = {{"version", "1.0"},
                {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                {"model", {{"type", "BPE"}, {"vocab", *vocab}, {"merges", m}}}};
    std::ofstream(d + "/tokenizer.json") << doc.dump();
    auto json = load_tokenizer(d + "/tokenizer.json");
    HARP_ASSERT_OK(json);
    EXPECT_EQ((*json)->encode(text), got);
  }
}

TEST(SentencePiece, MatchesPythonSentencepiece) {
  if (!enable_sentencepiece()) GTEST_SKIP() << "built without libsentencepiece-dev";
  if (!have_python("sentencepiece, json")) GTEST_SKIP() << "no python3-sentencepiece";
  const std::string d = dir("spm");
  const std::string text = sample_text(4000, 11) + "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87\n";
  std::ofstream(d + "/text.txt", std::ios::binary) << text;
  ASSERT_EQ(std::system((kPython + " " + kScript + " spm " + d + "/text.txt 400 " + d).c_str()), 0);
  auto want = load_document(d + "/ids.json");
  HARP_ASSERT_OK(want);
  auto t = load_tokenizer(d + "/sp.model");
  HARP_ASSERT_OK(t);
  EXPECT_EQ((*t)->vocab_size(), 400);
  EXPECT_EQ((*t)->encode(text), want->get<std::vector<std::uint32_t>>());
  // A folder holding tokenizer.model is found as LLaMA's releases lay it out.
  std::filesystem::copy_file(d + "/sp.model", d + "/tokenizer.model");
  std::filesystem::remove(d + "/text.txt");
  auto folder = load_tokenizer(d);
  HARP_ASSERT_OK(folder);
  EXPECT_EQ((*folder)->describe(), "SentencePiece (tokenizer.model), vocabulary 400");
}

TEST(Tokenizer, BadFilesAreRefusedNamingTheEntry) {
  const std::string d = dir("bad");
  auto error = [](const std::string& path) {
    auto t = load_tokenizer(path);
    return t.ok() ? std::string("loaded") : t.status().message();
  };
  EXPECT_NE(error(d).find("holds none of tokenizer.json, tokenizer.model, vocab.json + merges.txt"),
            std::string::npos);
  EXPECT_NE(error(d + "/missing.json").find("no such file"), std::string::npos);
  std::ofstream(d + "/tokenizer.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
  EXPECT_NE(error(d + "/tokenizer.json").find("model.type is \"Unigram\"; only BPE"), std::string::npos);
  std::ofstream(d + "/tokenizer.json") << R"({"pre_tokenizer": {"type": "Metaspace"},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  EXPECT_NE(error(d + "/tokenizer.json").find("only GPT-2's (ByteLevel with its regex)"), std::string::npos);
  std::ofstream(d + "/tokenizer.json") << R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})";
  EXPECT_NE(error(d + "/tokenizer.json").find("model.merges[0] \"a\" is not two symbols"), std::string::npos);
  std::ofstream(d + "/tokenizer.json") << R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})";
  EXPECT_NE(error(d + "/tokenizer.json").find("token \"a\" has id -1"), std::string::npos);
  std::ofstream(d + "/tokenizer.json") << R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  EXPECT_NE(error(d + "/tokenizer.json").find("has no token for byte 0"), std::string::npos);
  std::filesystem::remove(d + "/tokenizer.json");
  std::ofstream(d + "/vocab.json") << R"({"a": 0})";
  std::ofstream(d + "/merges.txt") << "#version: 0.2\na b c\n";
  EXPECT_NE(error(d).find("merges.txt: line 2 \"a b c\" is not two symbols"), std::string::npos) << error(d);
  std::ofstream(d + "/junk.model") << "not a protobuf";
  EXPECT_NE(error(d + "/junk.model").find("junk.model"), std::string::npos);
  if (enable_sentencepiece()) {
    EXPECT_NE(error(d + "/junk.model").find("is not a SentencePiece model"), std::string::npos)
        << error(d + "/junk.model");
  }
}

// Found by the third hardening sweep: a vocabulary whose ids are not one-to-one was
// accepted (decoding cannot map the shared id back), and a field of the wrong kind where
// text or a flag belongs crashed; each is one message naming the field.
TEST(Tokenizer, SharedIdsAndMistypedFieldsAreRefusedNamingThem) {
  const std::string d = dir("bad_kinds");
  auto error = [](const std::string& path) {
    auto t = load_tokenizer(path);
    return t.ok() ? std::string("loaded") : t.status().message();
  };
  std::ofstream(d + "/vocab.json") << R"({"a": 0, "b": 1, "c": 1})";
  std::ofstream(d + "/merges.txt") << "#version: 0.2\n";
  EXPECT_NE(error(d).find("tokens \"b\" and \"c\" share id 1"), std::string::npos) << error(d);
  std::filesystem::remove(d + "/vocab.json");
  std::filesystem::remove(d + "/merges.txt");
  const std::string json = d + "/tokenizer.json";
  std::ofstream(json) << R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"x": 7, "y": 7}, "merges": []}})";
  EXPECT_NE(error(json).find("model.vocab: tokens \"x\" and \"y\" share id 7"), std::string::npos) << error(json);
  std::ofstream(json) << R"({"model": {"type": {"name": "BPE"}, "vocab": {}}})";
  EXPECT_NE(error(json).find("model.type = {\"name\":\"BPE\"}: must be text"), std::string::npos) << error(json);
  std::ofstream(json) << R"({"pre_tokenizer": {"type": 3}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  EXPECT_NE(error(json).find("pre_tokenizer.type = 3: must be text"), std::string::npos) << error(json);
  std::ofstream(json) << R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": []}]},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  EXPECT_NE(error(json).find("pre_tokenizer.pretokenizers[0].type = []: must be text"), std::string::npos)
      << error(json);
  std::ofstream(json) << R"({"pre_tokenizer": {"type": "ByteLevel", "use_regex": "yes"},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  EXPECT_NE(error(json).find("pre_tokenizer.use_regex = \"yes\": must be true or false"), std::string::npos)
      << error(json);
}

}  // namespace
}  // namespace harp::data

namespace harp::data {
namespace {

// harp data prepare reads and encodes in pieces cut after a newline a non-space character
// follows: the tokens equal the whole text's, for every tokenizer, at any piece size.
std::vector<std::uint32_t> prepared(const Tokenizer& t, const std::string& text, std::int64_t piece) {
  const std::string d = dir("prepare_" + std::to_string(piece));
  std::ofstream(d + "/text.txt", std::ios::binary) << text;
  PrepareOptions o;
  o.input = d + "/text.txt";
  o.output = d + "/out.bin";
  o.format = TokenFormat::kLlmc32;
  o.piece_bytes = piece;
  auto r = prepare_tokens(t, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  auto back = read_tokens(o.output);
  EXPECT_TRUE(back.ok()) << back.status().to_string();
  return back.ok() ? back->ids : std::vector<std::uint32_t>{};
}

TEST(Prepare, PiecesGiveTheWholeTextsTokens) {
  const std::string text = sample_text(6000, 5) + "\n  indented\n\nnext caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87\nend";
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  tokenizers.push_back(byte_tokenizer());
  const std::string d = dir("prepare_bpe");
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_byte_symbol(static_cast<unsigned char>(b))] = b;
  vocab["th"] = 256, vocab["the"] = 257, vocab["\xc4\xa0the"] = 258;
  std::ofstream(d + "/vocab.json") << vocab.dump();
  std::ofstream(d + "/merges.txt") << "#version: 0.2\nt h\nth e\n\xc4\xa0 the\n";
  auto bpe = load_tokenizer(d);
  HARP_ASSERT_OK(bpe);
  tokenizers.push_back(std::move(*bpe));
  if (enable_sentencepiece() && have_python("sentencepiece, json")) {
    const std::string s = dir("prepare_spm");
    std::ofstream(s + "/text.txt", std::ios::binary) << text;
    ASSERT_EQ(std::system((kPython + " " + kScript + " spm " + s + "/text.txt 400 " + s).c_str()), 0);
    auto sp = load_tokenizer(s + "/sp.model");
    HARP_ASSERT_OK(sp);
    tokenizers.push_back(std::move(*sp));
  }
  for (const auto& t : tokenizers) {
    SCOPED_TRACE(t->describe());
    const std::vector<std::uint32_t> whole = t->encode(text);
    for (std::int64_t piece : {4096, 10000, 1 << 20}) EXPECT_EQ(prepared(*t, text, piece), whole) << piece;
  }
}

// A stretch of text with no newline to cut at is held whole, so it is bounded: at the
// bound it is tokenised as the whole text; one byte past it, refused naming where the
// stretch starts (was: a 900 MB single-line text ran out of memory under 2 GiB).
TEST(Prepare, AStretchWithoutANewlineIsBounded) {
  const std::string head = "first line\nsecond line\n";
  const std::string stretch(10000, 'x');  // read in 4 KiB blocks: the bound holds across reads
  const std::string text = head + stretch + "\nlast\n";
  const std::string d = dir("prepare_uncut");
  std::ofstream(d + "/text.txt", std::ios::binary) << text;
  auto bytes = byte_tokenizer();
  PrepareOptions o;
  o.input = d + "/text.txt";
  o.output = d + "/out.bin";
  o.piece_bytes = 16;
  // The longest stretch: from the cut after "second line\n" to the one before "last".
  const auto longest = static_cast<std::int64_t>(stretch.size() + 1);
  o.max_uncut_bytes = longest;
  HARP_ASSERT_OK(prepare_tokens(*bytes, o));
  auto back = read_tokens(o.output);
  HARP_ASSERT_OK(back);
  EXPECT_EQ(back->ids, bytes->encode(text));
  o.max_uncut_bytes = longest - 1;
  auto refused = prepare_tokens(*bytes, o);
  ASSERT_FALSE(refused.ok());
  const std::string& m = refused.status().message();
  EXPECT_NE(m.find("text.txt: "), std::string::npos) << m;
  EXPECT_NE(m.find(" bytes from byte " + std::to_string(head.size()) + " on hold no newline"), std::string::npos) << m;
  EXPECT_NE(m.find("over the limit of " + std::to_string(longest - 1)), std::string::npos) << m;
  EXPECT_NE(m.find("break the text into lines"), std::string::npos) << m;
}

}  // namespace
}  // namespace harp::data

namespace harp::data {
namespace {

// Decoding: decode(encode(text)) == text on multilingual text for every tokenizer
// (SentencePiece on text its nmt_nfkc normaliser leaves as it is: single spaces, no
// newlines), and an id outside the vocabulary is U+FFFD.
TEST(Decode, RoundTripsMultilingualTextForEveryTokenizer) {
  const std::string text = "h\xc3\xa9llo w\xc3\xb6rld, \xe4\xb8\xad\xe6\x96\x87 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
                           "\xd1\x80\xd1\x83\xd1\x81\xd1\x81\xd0\xba\xd0\xb8\xd0\xb9 \xe2\x80\x94 \xf0\x9f\x8e\x89\n"
                           "  two spaces\tand a tab, isn't it? 3.14\n\nend \xff\xfe raw bytes";
  const auto byte = byte_tokenizer();
  EXPECT_EQ(byte->decode(byte->encode(text)), text);
  EXPECT_EQ(byte->decode({104, 300, 105}), "h\xef\xbf\xbdi");
  // GPT-2 BPE: every byte symbol plus merges, so multi-byte characters stay whole tokens.
  const std::string d = dir("decode_bpe");
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_byte_symbol(static_cast<unsigned char>(b))] = b;
  vocab["\xc4\xa0w"] = 256, vocab["\xc3\xa4\xc2\xb8"] = 257, vocab["ll"] = 258;
  std::ofstream(d + "/vocab.json") << vocab.dump();
  std::ofstream(d + "/merges.txt") << "#version: 0.2\n\xc4\xa0 w\n\xc3\xa4 \xc2\xb8\nl l\n";
  auto bpe = load_tokenizer(d);
  HARP_ASSERT_OK(bpe);
  const auto ids = (*bpe)->encode(text);
  EXPECT_LT(ids.size(), text.size()) << "the merges apply";
  EXPECT_EQ((*bpe)->decode(ids), text);
  EXPECT_EQ((*bpe)->decode({'h', 99999}), "h\xef\xbf\xbd");
  // A sample of English-like text as well (contractions, numbers, runs of white space).
  const std::string english = sample_text(2000, 3);
  EXPECT_EQ((*bpe)->decode((*bpe)->encode(english)), english);
  if (enable_sentencepiece() && have_python("sentencepiece, json")) {
    const std::string s = dir("decode_spm");
    std::ofstream(s + "/text.txt", std::ios::binary) << english;
    ASSERT_EQ(std::system((kPython + " " + kScript + " spm " + s + "/text.txt 400 " + s).c_str()), 0);
    auto sp = load_tokenizer(s + "/sp.model");
    HARP_ASSERT_OK(sp);
    const std::string plain = "h\xc3\xa9llo w\xc3\xb6rld, \xe4\xb8\xad\xe6\x96\x87 \xd1\x80\xd1\x83\xd1\x81 \xe2\x80\x94 "
                              "\xf0\x9f\x8e\x89 the pipeline stage isn't slow";
    EXPECT_EQ((*sp)->decode((*sp)->encode(plain)), plain) << "byte fallback restores what the vocabulary lacks";
    EXPECT_EQ((*sp)->decode({100000}), "\xef\xbf\xbd");
  }
}

}  // namespace
}  // namespace harp::data
