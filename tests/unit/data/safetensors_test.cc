// safetensors: a round trip of every kind of tensor, one tensor read alone, a file
// checked by an independent reader (Python's struct and json, no HARP code), and every
// malformed header refused with a message naming the file and the rule, never a crash.
#include "harp/data/safetensors.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "testutil/status.h"
#include "testutil/temp_dir.h"

namespace harp::data {
namespace {

using testing::TempDir;

std::string floats(const std::vector<float>& v) {
  std::string b(v.size() * 4, '\0');
  std::memcpy(b.data(), v.data(), b.size());  // this machine is little-endian (x86-64, aarch64)
  return b;
}

// A file from a header text and data bytes, laid out by hand.
void write_raw(const std::string& path, const std::string& header, const std::string& data, std::uint64_t n = 0) {
  std::string b;
  if (n == 0) n = header.size();
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  std::ofstream(path, std::ios::binary) << b << header << data;
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  std::vector<SafetensorsTensor> in = {
      {"wte.weight", "F32", {2, 3}, floats({1, 2, 3, 4, 5, 6})},
      {"h.0.attn.bias", "BF16", {4}, std::string("\x80\x3f\x00\x40\x40\x40\x80\x40", 8)},
      {"step", "I64", {}, std::string("\x07\0\0\0\0\0\0\0", 8)},
      {"empty", "F16", {0, 5}, ""},
  };
  HARP_ASSERT_OK(write_safetensors(path, in, {{"format", "pt"}}));
  auto f = read_safetensors_header(path);
  HARP_ASSERT_OK(f);
  EXPECT_EQ(f->metadata.at("format"), "pt");
  ASSERT_EQ(f->tensors.size(), in.size());
  EXPECT_EQ(f->data_start % 8, 0u);  // the header is padded to 8 bytes
  for (const auto& t : in) {
    const SafetensorsEntry* e = f->find(t.name);
    ASSERT_NE(e, nullptr) << t.name;
    EXPECT_EQ(e->dtype, t.dtype);
    EXPECT_EQ(e->shape, t.shape);
    auto bytes = read_tensor_bytes(*f, *e);
    HARP_ASSERT_OK(bytes);
    EXPECT_EQ(*bytes, t.bytes) << t.name;
  }
  EXPECT_EQ(f->find("wte.weight")->numel(), 6);
  EXPECT_EQ(f->find("nothing"), nullptr);
  int entries = 0;  // atomic: no temporary left behind
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);
}

TEST(Safetensors, AnIndependentReaderReadsWhatWeWrite) {
  if (std::system("python3 -c 'import json, struct' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  HARP_ASSERT_OK(write_safetensors(path, {{"a", "F32", {2, 2}, floats({1.5f, -2.0f, 3.25f, 0.0f})},
                                          {"b", "F32", {1}, floats({42.0f})}}));
  const std::string script = dir.file("check.py");
  std::ofstream(script) << "import json, struct, sys\n"
                           "raw = open(sys.argv[1], 'rb').read()\n"
                           "n = struct.unpack('<Q', raw[:8])[0]\n"
                           "h = json.loads(raw[8:8 + n])\n"
                           "data = raw[8 + n:]\n"
                           "def get(k):\n"
                           "    b, e = h[k]['data_offsets']\n"
                           "    return list(struct.unpack('<%df' % ((e - b) // 4), data[b:e]))\n"
                           "assert h['a']['dtype'] == 'F32' and h['a']['shape'] == [2, 2], h\n"
                           "assert get('a') == [1.5, -2.0, 3.25, 0.0], get('a')\n"
                           "assert get('b') == [42.0], get('b')\n"
                           "assert max(v['data_offsets'][1] for k, v in h.items() if k != '__metadata__') == len(data)\n";
  EXPECT_EQ(std::system(("python3 " + script + " " + path).c_str()), 0);
}

TEST(Safetensors, MalformedFilesAreRefusedWithTheRule) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string f8 = floats({1, 2});  // 8 bytes
  struct Case {
    std::string header, data;
    std::uint64_t length;  // 0: the header's
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{}", "", 1000, "header length 1000 is larger than the 2 bytes after it"},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", f8 + f8, 0,
       "shape [3] of F32 is 12 bytes but data_offsets span 16"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], )"
       R"("data_offsets": [4, 12]}})", f8 + f8, 0, "overlap \"a\""},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", f8, 0, "a safetensors file has no holes"},
      {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", f8 + "x", 0, "the file is truncated"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", f8, 0, "trailing bytes belong to no tensor"},
      {R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", f8, 0, "dtype \"Q4\" is unknown"},
      {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", f8, 0, "dimensions are non-negative"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", f8, 0, "end before they begin"},
      {R"({"a": {"dtype": "F32", "shape": [2]}})", f8, 0, "has no data_offsets"},
      {R"({"a": 3})", f8, 0, "each tensor is an object"},
      {R"([1, 2])", f8, 0, "not a JSON object of tensors"},
      {R"({"a": )", f8, 0, "(header)"},
      {R"({"__metadata__": {"k": 1}})", "", 0, "__metadata__ \"k\" is not a string"},
      {R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", f8, 0,
       "too large"},
  };
  for (const auto& c : cases) {
    write_raw(path, c.header, c.data, c.length);
    auto r = read_safetensors_header(path);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.want;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().message();
  }
  std::ofstream(path, std::ios::binary) << "abc";
  auto tiny = read_safetensors_header(path);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("shorter than the 8-byte header length"), std::string::npos);
  auto missing = read_safetensors_header(dir.file("none.safetensors"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  auto folder = read_safetensors_header(dir.path());
  ASSERT_FALSE(folder.ok());
  EXPECT_NE(folder.status().message().find("not a regular file"), std::string::npos);
}

TEST(Safetensors, WritingRefusesWhatCouldNotBeRead) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  for (const auto& [tensors, want] : std::vector<std::pair<std::vector<SafetensorsTensor>, std::string>>{
           {{{"a", "F32", {3}, floats({1, 2})}}, "holds 8 bytes but its shape needs 12"},
           {{{"a", "F32", {2}, floats({1, 2})}, {"a", "F32", {2}, floats({1, 2})}}, "is written twice"},
           {{{"", "F32", {2}, floats({1, 2})}}, "is not a tensor name"},
           {{{"a", "F33", {2}, floats({1, 2})}}, "is unknown"}}) {
    Status s = write_safetensors(path, tensors);
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

}  // namespace
}  // namespace harp::data
