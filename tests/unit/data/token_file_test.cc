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

}  // namespace
}  // namespace harp::data
