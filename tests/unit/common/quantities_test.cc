// The one table of ranges (common/quantities.h) against its documentation, its bounds
// against the readers, and the whole-string number parser against atoi's mistakes.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "harp/common/parse.h"
#include "harp/common/quantities.h"
#include "harp/common/sha256.h"

namespace harp {
namespace {

TEST(Quantities, EveryRangeIsDocumentedAsTheCodeHasIt) {
  std::ifstream in(std::string(HARP_SOURCE_DIR) + "/docs/file_formats.md");
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const size_t section = text.find("## Ranges");
  ASSERT_NE(section, std::string::npos) << "docs/file_formats.md has a Ranges section";
  const std::string ranges = text.substr(section, text.find("\n## ", section + 1) - section);
  for (const auto& [name, q] : all_quantities()) {
    SCOPED_TRACE(name);
    // A row "| what | range |" for each: the wording the messages use.
    const std::string row = std::string("| ") + q->what + " | " + range_text(*q) + " |";
    EXPECT_NE(ranges.find(row), std::string::npos) << "missing row: " << row;
    EXPECT_LT(q->min, q->max);
    EXPECT_TRUE(in_range(*q, q->max));
    EXPECT_EQ(in_range(*q, q->min), !q->min_exclusive);
    EXPECT_FALSE(in_range(*q, std::nan("")));
  }
}

TEST(Quantities, ReadersRefuseValuesOutsideAndSayTheRange) {
  const Json node = Json::parse(R"({"bw": 1e-300, "ok": 100, "lr": 0})");
  FieldReader r(node, "c.yaml", "links[0]");
  EXPECT_EQ(read_quantity(r, "ok", quantity::kBandwidthGbps), 100);
  EXPECT_FALSE(r.failed());
  read_quantity(r, "bw", quantity::kBandwidthGbps);
  ASSERT_TRUE(r.failed());
  EXPECT_EQ(r.finish().message().substr(0, 27), "c.yaml: links[0].bw = 1e-30");
  EXPECT_NE(r.finish().message().find("between 0.001 and 100000 Gbit/s"), std::string::npos) << r.finish().message();
  EXPECT_FALSE(check_quantity(quantity::kLearningRate, 0, "f", "lr").ok()) << "above 0";
  EXPECT_TRUE(check_quantity(quantity::kLearningRate, 3e-4, "f", "lr").ok());
}

TEST(Parse, IntegersAreReadWholeAndInRange) {
  EXPECT_EQ(*parse_integer("12", 0, 100), 12);
  EXPECT_EQ(*parse_integer("-3", -5, 5), -3);
  for (const char* bad : {"", "abc", "1x", "0.9", " 1", "1 ", "4294967296", "99999999999999999999", "1e3", "-", "+"})
    EXPECT_FALSE(parse_integer(bad, 0, 1 << 30).ok()) << bad;
  EXPECT_FALSE(parse_integer("101", 0, 100).ok());
  EXPECT_NE(parse_integer("101", 0, 100).status().message().find("from 0 to 100"), std::string::npos);
  EXPECT_DOUBLE_EQ(*parse_real("1e-3"), 1e-3);
  for (const char* bad : {"nan", "inf", "-inf", "0x10", "1x", "", "1e99999", " 1"})
    EXPECT_FALSE(parse_real(bad).ok()) << bad;
}

TEST(Sha256, PiecesGiveTheWholeDigest) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 7);
  for (size_t piece : {1u, 3u, 63u, 64u, 65u, 999u}) {
    Sha256 s;
    for (size_t at = 0; at < data.size(); at += piece) s.update(data.data() + at, std::min(piece, data.size() - at));
    EXPECT_EQ(s.hex(), sha256_hex(data)) << piece;
  }
}

}  // namespace
}  // namespace harp
