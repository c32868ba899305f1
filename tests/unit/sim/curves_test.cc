// Training curves from metrics.jsonl: the records read back as written (step lines and
// validation records; other lines skipped), one polyline per run and panel, and a
// damaged line named by its number.
#include "harp/sim/curves.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "testutil/temp_dir.h"

namespace harp::sim {
namespace {

void write_metrics(const std::string& dir, const std::string& text) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl") << text;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(Curves, ReadTheRecordsAndDrawALinePerRunAndPanel) {
  testing::TempDir d;
  write_metrics(d.file("a"), R"({"step": 0, "loss": 5.5, "tokens_per_s": 1000, "iteration_s": 0.5}
{"eval_after_steps": 0, "val_loss": 5.6}
{"step": 1, "loss": 4.5, "tokens_per_s": 2000, "iteration_s": 0.25}
{"event": "checkpoint", "step_done": 2}
{"eval_after_steps": 2, "val_loss": 4.4}
)");
  write_metrics(d.file("b"), R"({"step": 0, "loss": 5.0, "tokens_per_s": 900, "iteration_s": 0.6}
)");
  auto a = load_curves(d.file("a"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->name, "a");
  ASSERT_EQ(a->loss.size(), 2u);
  EXPECT_EQ(a->loss[1], (std::pair<double, double>{1, 4.5}));
  ASSERT_EQ(a->val_loss.size(), 2u);
  EXPECT_EQ(a->val_loss[1], (std::pair<double, double>{2, 4.4}));
  EXPECT_EQ(a->iteration_ms[1], (std::pair<double, double>{1, 250}));
  EXPECT_EQ(a->tokens_per_s[0].second, 1000);
  auto b = load_curves(d.file("b"));
  ASSERT_TRUE(b.ok());
  const std::string svg = curves_svg({*a, *b}, "two runs");
  EXPECT_EQ(count(svg, "<polyline"), 8u) << "2 runs x 4 panels";
  EXPECT_EQ(count(svg, "<circle"), 3u) << "b has one step: a dot in the three panels it has data for";
  EXPECT_NE(svg.find(">a</text>"), std::string::npos);
  EXPECT_NE(svg.find(">b</text>"), std::string::npos);
  EXPECT_NE(svg.find(">5.5</text>"), std::string::npos) << "the loss axis spans 4.5 to 5.5";
  write_metrics(d.file("c"), "{\"step\": 0, \"loss\": 1}\n{\"step\": 1, \"loss\n");
  auto c = load_curves(d.file("c"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("line 2"), std::string::npos) << c.status().message();
  write_metrics(d.file("e"), "");
  EXPECT_FALSE(load_curves(d.file("e")).ok());
}

}  // namespace
}  // namespace harp::sim
