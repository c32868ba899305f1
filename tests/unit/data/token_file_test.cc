// Token files: byte-level tokens, an exact little-endian byte layout, a round trip of
// every uint16 value, and errors that name the file for missing, empty and odd files.
#include "harp/data/token_file.h"

#include <gtest/gtest.h>

#include <fstream>

#include "harp/common/document.h"
#include "testutil/status.h"
#include "testutil/temp_dir.h"

namespace harp::data {
namespace {

using testing::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TokenFile, ByteTokensAreTheUnsignedBytes) {
  EXPECT_EQ(byte_tokens("Ab\n"), (std::vector<std::uint16_t>{65, 98, 10}));
  EXPECT_EQ(byte_tokens(std::string("\xff\x00", 2)), (std::vector<std::uint16_t>{255, 0}));
  EXPECT_TRUE(byte_tokens("").empty());
}

TEST(TokenFile, LayoutIsLittleEndianUint16) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  ASSERT_TRUE(write_token_file({0x0102, 0xff00, 7}, path).ok());
  auto bytes = read_text_file(path);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, std::string("\x02\x01\x00\xff\x07\x00", 6));
}

TEST(TokenFile, RoundTripsEveryValue) {
  TempDir dir;
  const std::string path = dir.file("all.bin");
  std::vector<std::uint16_t> tokens;
  for (int v = 0; v < 65536; ++v) tokens.push_back(static_cast<std::uint16_t>(v));
  ASSERT_TRUE(write_token_file(tokens, path).ok());
  auto back = read_token_file(path);
  HARP_ASSERT_OK(back);
  EXPECT_EQ(*back, tokens);
  // The write is atomic: no temporary file is left next to the result.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);
}

TEST(TokenFile, ErrorsNameTheFileAndTheProblem) {
  TempDir dir;
  auto missing = read_token_file(dir.file("missing.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.file("missing.bin") + ": token file does not exist"),
            std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("harp data prepare"), std::string::npos);

  write_bytes(dir.file("odd.bin"), "abc");
  auto odd = read_token_file(dir.file("odd.bin"));
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find(dir.file("odd.bin") + ": 3 bytes is an odd byte count"),
            std::string::npos)
      << odd.status().message();

  write_bytes(dir.file("empty.bin"), "");
  auto empty = read_token_file(dir.file("empty.bin"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find(dir.file("empty.bin") + ": token file is empty"), std::string::npos)
      << empty.status().message();

  auto folder = read_token_file(dir.path());
  ASSERT_FALSE(folder.ok());
  EXPECT_NE(folder.status().message().find("is a folder"), std::string::npos);

  Status s = write_token_file({}, dir.file("none.bin"));
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.file("none.bin")));
  s = write_token_file({1}, dir.file("no_such_folder/x.bin"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no_such_folder/x.bin"), std::string::npos) << s.message();
}

// llm.c's layout, built byte by byte here: 256 little-endian int32 (magic, version,
// count, zeros), then the tokens.
std::string llmc_bytes(std::uint32_t magic, std::uint32_t version, std::uint32_t count,
                       const std::vector<std::uint32_t>& ids, int size) {
  std::string b;
  auto put = [&b](std::uint32_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(magic, 4);
  put(version, 4);
  put(count, 4);
  b.resize(1024, '\0');
  for (std::uint32_t id : ids) put(id, size);
  return b;
}

TEST(TokenFile, LlmcFilesAreDetectedByTheirHeader) {
  TempDir dir;
  write_bytes(dir.file("gpt2.bin"), llmc_bytes(20240520, 1, 3, {50256, 7, 65535}, 2));
  auto t16 = read_tokens(dir.file("gpt2.bin"));
  HARP_ASSERT_OK(t16);
  EXPECT_EQ(t16->format, TokenFormat::kLlmc16);
  EXPECT_EQ(t16->ids, (std::vector<std::uint32_t>{50256, 7, 65535}));
  auto as16 = read_token_file(dir.file("gpt2.bin"));
  HARP_ASSERT_OK(as16);
  EXPECT_EQ(*as16, (std::vector<std::uint16_t>{50256, 7, 65535}));

  write_bytes(dir.file("llama3.bin"), llmc_bytes(20240801, 7, 2, {128000, 128255}, 4));
  auto t32 = read_tokens(dir.file("llama3.bin"));
  HARP_ASSERT_OK(t32);
  EXPECT_EQ(t32->format, TokenFormat::kLlmc32);
  EXPECT_EQ(t32->ids, (std::vector<std::uint32_t>{128000, 128255}));
  EXPECT_FALSE(read_token_file(dir.file("llama3.bin")).ok());  // the uint16 reader refuses it

  // A raw file is what it always was.
  ASSERT_TRUE(write_token_file({1, 2, 3}, dir.file("raw.bin")).ok());
  auto raw = read_tokens(dir.file("raw.bin"));
  HARP_ASSERT_OK(raw);
  EXPECT_EQ(raw->format, TokenFormat::kRaw16);
  EXPECT_EQ(raw->ids, (std::vector<std::uint32_t>{1, 2, 3}));
}

TEST(TokenFile, WriteTokensWritesTheLlmcLayoutExactly) {
  TempDir dir;
  ASSERT_TRUE(write_tokens({50256, 1}, TokenFormat::kLlmc16, dir.file("a.bin")).ok());
  EXPECT_EQ(*read_text_file(dir.file("a.bin")), llmc_bytes(20240520, 1, 2, {50256, 1}, 2));
  ASSERT_TRUE(write_tokens({128000, 1}, TokenFormat::kLlmc32, dir.file("b.bin")).ok());
  EXPECT_EQ(*read_text_file(dir.file("b.bin")), llmc_bytes(20240801, 7, 2, {128000, 1}, 4));
  Status s = write_tokens({70000}, TokenFormat::kLlmc16, dir.file("c.bin"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("too large for llm.c uint16 tokens"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir.file("c.bin")));
}

TEST(TokenFile, BadLlmcHeadersAreRefusedNamingTheFigures) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {llmc_bytes(20240520, 3, 2, {1, 2}, 2), "has version 3; this magic's version is 1"},
      {llmc_bytes(20240801, 1, 2, {1, 2}, 4), "has version 1; this magic's version is 7"},
      {llmc_bytes(20240520, 1, 5, {1, 2}, 2), "says 5 tokens (10 bytes) but 4 bytes follow the header"},
      {llmc_bytes(20240801, 7, 1, {1, 2}, 4), "says 1 tokens (4 bytes) but 8 bytes follow the header"},
      {llmc_bytes(20240520, 1, 0, {}, 2), "says 0 tokens"},
      {llmc_bytes(20240520, 1, 2, {1, 2}, 2).substr(0, 600), "shorter than its 1024-byte header"},
  };
  for (const auto& [bytes, want] : cases) {
    write_bytes(dir.file("bad.bin"), bytes);
    auto r = read_tokens(dir.file("bad.bin"));
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(dir.file("bad.bin") + ": an llm.c token file"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

// A token file is read in place: opening and reading every token of a 96 MiB file adds
// page cache, not anonymous memory (the previous reader held the file and a copy widened
// to 32 bits: 3x its size, so a 1.5 GiB corpus needed 4.5 GiB).
std::int64_t rss_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}
std::int64_t rss_anon_kib() { return rss_kib("RssAnon"); }

TEST(TokenFile, IsReadInPlaceNotCopied) {
  testing::TempDir d;
  const std::int64_t tokens = 48ll << 20;  // 96 MiB of uint16
  {
    std::ofstream out(d.file("big.bin"), std::ios::binary);
    std::string block(1 << 20, '\0');
    for (size_t i = 0; i < block.size(); i += 2) block[i] = static_cast<char>(i / 2 % 251);
    for (std::int64_t w = 0; w < tokens * 2; w += static_cast<std::int64_t>(block.size())) out << block;
  }
  const std::int64_t before = rss_anon_kib();
  ASSERT_GE(before, 0);
  auto m = MappedTokens::open(d.file("big.bin"));
  HARP_ASSERT_OK(m);
  ASSERT_EQ((*m)->size(), tokens);
  std::uint64_t sum = 0;
  for (std::int64_t i = 0; i < (*m)->size(); ++i) sum += (*m)->at(i);
  EXPECT_GT(sum, 0u);
  EXPECT_EQ((*m)->at(3), 3u);
  EXPECT_LT(rss_anon_kib() - before, 8 * 1024) << "KiB of anonymous memory for a 96 MiB token file";
}

// The scan for the largest id (what the runtime checks the vocabulary against) keeps at
// most one 64 MiB block of the file resident (was: all of it; a sparse 1.5 GiB file held
// 1.9 GB resident in harp train, over a 2 GiB limit with the rest of the run).
TEST(TokenFile, TheLargestIdIsFoundInBoundedResidentMemory) {
  testing::TempDir d;
  const std::int64_t bytes = std::int64_t{512} << 20;
  {
    std::ofstream out(d.file("sparse.bin"), std::ios::binary);
    out.seekp(bytes - 2);
    out.put(static_cast<char>(0x34));
    out.put(static_cast<char>(0x12));  // the last token: 0x1234
  }
  auto m = MappedTokens::open(d.file("sparse.bin"));
  HARP_ASSERT_OK(m);
  const std::int64_t before = rss_kib("RssFile");
  ASSERT_GE(before, 0);
  EXPECT_EQ((*m)->largest(), 0x1234u);
  EXPECT_LT(rss_kib("RssFile") - before, 96 * 1024) << "KiB resident after scanning a 512 MiB token file";
  EXPECT_EQ((*m)->at(bytes / 2 - 1), 0x1234u);  // released pages read back from the file
}

}  // namespace
}  // namespace harp::data
