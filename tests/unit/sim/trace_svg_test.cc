// Chrome trace and SVG output of a small simulated timeline: one event or box per
// executed action, well-formed documents, escaped text, fixed picture width.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <vector>

#include "harp/sim/svg.h"
#include "harp/sim/trace.h"
#include "sim_test_util.h"

namespace harp::sim {
namespace {

plan::Plan small_plan() {
  plan::Plan p = testing::equal_plan(3, 4, 3000, 5000, 1200);
  p.stages[0].subcluster_name = "v100";
  p.stages[1].subcluster_name = "a100 <fast> & \"new\"";
  p.stages[0].comm_latency_s = testing::ns(200);
  for (auto& s : p.stages) {
    s.allreduce_s = testing::ns(900);
    s.optimizer_s = testing::ns(300);
  }
  return p;
}

SimResult small_run(const plan::Plan& p) {
  return testing::simulate_ok(p, testing::lowered(3, 4, {4, 3, 1}));
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(TraceTest, OneEventPerActionOnTheRightThread) {
  const plan::Plan p = small_plan();
  const SimResult r = small_run(p);
  const Json trace = chrome_trace(r, p);
  ASSERT_TRUE(trace.contains("traceEvents"));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  // Survives a round trip through text.
  EXPECT_EQ(Json::parse(trace.dump()), trace);

  size_t compute = 0, sends = 0, recvs = 0, other = 0;
  double last_ts = -1;
  std::set<int> pids;
  std::set<std::string> process_names;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") process_names.insert(e["args"]["name"].get<std::string>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    const double ts = e["ts"].get<double>();
    EXPECT_GE(ts, last_ts) << "events are sorted by start";
    last_ts = ts;
    pids.insert(e["pid"].get<int>());
    const std::string name = e["name"];
    const int tid = e["tid"];
    if (name[0] == 'F' || name[0] == 'B') {
      EXPECT_EQ(tid, 0);
      ++compute;
      EXPECT_EQ(e["args"]["microbatch"].get<int>(), std::stoi(name.substr(1)));
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), name[0] == 'F' ? 3.0 : 5.0);  // µs
    } else if (name.rfind("SEND_", 0) == 0) {
      EXPECT_EQ(tid, 1);
      ++sends;
    } else if (name.rfind("RECV_", 0) == 0) {
      EXPECT_EQ(tid, 2);
      ++recvs;
    } else {
      EXPECT_TRUE(name == "REDUCE_GRAD" || name == "STEP") << name;
      EXPECT_EQ(tid, 0);
      ++other;
    }
  }
  EXPECT_EQ(compute, 2u * 3 * 4);
  EXPECT_EQ(sends, 2u * 2 * 4);
  EXPECT_EQ(recvs, 2u * 2 * 4);
  EXPECT_EQ(other, 2u * 3);
  EXPECT_EQ(compute + sends + recvs + other, r.actions_executed);
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(process_names,
            (std::set<std::string>{"stage 0 (v100)", "stage 1 (a100 <fast> & \"new\")",
                                   "stage 2"}));
}

TEST(TraceTest, SendsShowTheirLinkOccupancy) {
  const plan::Plan p = small_plan();
  const SimResult r = small_run(p);
  const Span& s = testing::find_span(r, 0, schedule::ActionKind::kSendF, 0);
  bool found = false;
  const Json trace = chrome_trace(r, p);
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != 0 || e["name"] != "SEND_F0") continue;
    found = true;
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), s.link_start_ns / 1000.0);
    EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.0);  // 1200 ns − 200 ns latency
    EXPECT_DOUBLE_EQ(e["args"]["arrive_us"].get<double>(), s.arrive_ns / 1000.0);
    EXPECT_EQ(e["args"]["to_rank"], 1);
  }
  EXPECT_TRUE(found);
}

// Minimal XML check: every tag closes in order, attributes are quoted, and every '&'
// starts an entity. Returns the first problem, or "".
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  size_t pos = doc.find("?>");  // skip the declaration
  if (doc.rfind("<?xml", 0) != 0 || pos == std::string::npos) return "no XML declaration";
  for (pos += 2; pos < doc.size(); ++pos) {
    if (doc[pos] == '&') {
      static const std::regex entity("^&(amp|lt|gt|quot|apos);");
      if (!std::regex_search(doc.substr(pos, 8), entity)) return "bare & at " + std::to_string(pos);
    }
    if (doc[pos] == '>') return "stray > at " + std::to_string(pos);
    if (doc[pos] != '<') continue;
    const size_t end = doc.find('>', pos);
    if (end == std::string::npos) return "unclosed tag";
    const std::string tag = doc.substr(pos + 1, end - pos - 1);
    if (tag.find('<') != std::string::npos) return "< inside tag " + tag;
    if (count_of(tag, "\"") % 2 != 0) return "unbalanced quotes in " + tag;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return "mismatched </" + tag.substr(1) + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    pos = end;
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

TEST(SvgTest, OneBoxPerComputeActionAndWellFormed) {
  const plan::Plan p = small_plan();
  const SimResult r = small_run(p);
  const std::string svg = svg_timeline(r, p, "tiny <plan> & co");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count_of(svg, "<svg "), 1u);
  EXPECT_EQ(count_of(svg, "</svg>"), 1u);
  EXPECT_EQ(count_of(svg, "<rect class=\"F\""), 12u);
  EXPECT_EQ(count_of(svg, "<rect class=\"B\""), 12u);
  EXPECT_EQ(count_of(svg, "<rect class=\"xf\""), 8u);  // one per forward transfer
  EXPECT_EQ(count_of(svg, "<rect class=\"xb\""), 8u);
  EXPECT_NE(svg.find("tiny &lt;plan&gt; &amp; co"), std::string::npos);
  EXPECT_NE(svg.find("a100 &lt;fast&gt; &amp; &quot;new&quot;"), std::string::npos);
  EXPECT_NE(svg.find("#4c78a8"), std::string::npos);
  EXPECT_NE(svg.find("#59a14f"), std::string::npos);
  EXPECT_NE(svg.find("stage 2"), std::string::npos);
}

// Every box lies inside the fixed 1400 px width, whatever the time scale.
TEST(SvgTest, WidthDoesNotDependOnTheTimeScale) {
  for (std::int64_t scale : {1, 1000, 1000000}) {
    plan::Plan p = testing::equal_plan(2, 3, 3 * scale, 5 * scale, 2 * scale);
    const SimResult r = testing::simulate_ok(p, testing::lowered(2, 3, {2, 1}));
    const std::string svg = svg_timeline(r, p, "scale");
    EXPECT_EQ(xml_problem(svg), "");
    EXPECT_NE(svg.find("width=\"1400\""), std::string::npos);
    static const std::regex rect("<rect class=\"[FBRSx][fb]?\" x=\"([0-9.]+)\" y=\"[0-9.]+\" "
                                 "width=\"([0-9.]+)\"");
    int boxes = 0;
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), rect); it != std::sregex_iterator();
         ++it) {
      ++boxes;
      EXPECT_LE(std::stod((*it)[1]) + std::stod((*it)[2]), 1400.0 + 1e-6);
    }
    EXPECT_EQ(boxes, 12 + 3 + 3 + 2 * 2);  // computes, forward and backward sends, end terms
    EXPECT_NE(svg.find(">ms</text>"), std::string::npos);
  }
}

}  // namespace
}  // namespace harp::sim
