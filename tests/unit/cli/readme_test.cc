// Docs that execute (hardening, fourth round, class 9): every quick command the README
// shows with its output (`$ harp plan ...`, `$ harp model show ...`, `$ harp profile
// import ...`) is run here as written, in order, from the repository's root, and each line
// the README quotes must be a line the command printed: the same words, and every number
// within 0.5% (or 0.02 absolute, for rounding in the last digit). The README drifted from
// what the commands printed three times before this test (the worked example's memory
// 7.0 GiB against 8.2, its search counts, the GPT-6.7B paragraph). Commands that train,
// measure or need a run's output (launch, train, profile without import, export, generate)
// are not run here; their figures name their command and date.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "testutil/files.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"

namespace harp::testing {
namespace {

namespace fs = std::filesystem;
const std::string kSource = HARP_SOURCE_DIR;

struct Quoted {
  int line = 0;                     // of the command in README.md
  std::string command;              // after "$ harp "
  std::vector<std::string> output;  // the lines quoted after it
};

// The `$ harp ...` commands of README's code blocks with the lines quoted after each.
std::vector<Quoted> quoted_commands(const std::string& readme) {
  std::vector<Quoted> out;
  std::istringstream in(readme);
  bool in_block = false;
  int n = 0;
  Quoted* current = nullptr;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      current = nullptr;
      continue;
    }
    if (!in_block) continue;
    if (line.rfind("$ ", 0) == 0) {
      out.push_back({n, line.substr(2), {}});
      current = &out.back();
      while (!current->command.empty() && current->command.back() == '\\') {  // a continued line
        std::string next;
        if (!std::getline(in, next)) break;
        ++n;
        current->command.pop_back();
        current->command += " " + next;
      }
      continue;
    }
    if (current != nullptr && !line.empty()) current->output.push_back(line);
  }
  return out;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string t; in >> t;) w.push_back(t);
  return w;
}

// A line's numbers and its text with each number replaced by '#'.
const std::regex kNumber(R"([-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?)");
std::string skeleton(const std::string& line, std::vector<double>* numbers) {
  std::string text;
  auto begin = std::sregex_iterator(line.begin(), line.end(), kNumber);
  size_t at = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    text += line.substr(at, static_cast<size_t>(it->position()) - at) + "#";
    at = static_cast<size_t>(it->position() + it->length());
    std::string digits = it->str();
    digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
    numbers->push_back(std::stod(digits));
  }
  text += line.substr(at);
  std::string joined;
  for (const auto& w : words(text)) joined += w + " ";
  return joined;
}

// Whether `quoted` is `printed` up to the tolerance. A "search:" line's first figure is a
// wall-clock time, which no run repeats: its counts are compared, not it.
bool same_line(const std::string& quoted, const std::string& printed) {
  std::vector<double> a, b;
  if (skeleton(quoted, &a) != skeleton(printed, &b) || a.size() != b.size()) return false;
  const bool timed = quoted.rfind("search:", 0) == 0;
  for (size_t i = timed ? 1 : 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > std::max(0.02, 0.005 * std::abs(b[i]))) return false;
  return true;
}

// Runs in the repository's root (the README's paths are relative to it), outputs under `out`.
struct InSource {
  fs::path was = fs::current_path();
  InSource() { fs::current_path(kSource); }
  ~InSource() { fs::current_path(was); }
};

TEST(ReadmeFigures, QuotedOutputIsWhatTheCommandsPrint) {
  const std::vector<Quoted> all = quoted_commands(read(kSource + "/README.md"));
  TempDir out;
  InSource here;
  int run = 0, lines = 0;
  for (const Quoted& q : all) {
    const std::vector<std::string> w = words(q.command);
    if (w.size() < 2 || w[0] != "harp") continue;
    const bool quick = w[1] == "plan" || w[1] == "simulate" || (w[1] == "model" && w[2] == "show") ||
                       (w[1] == "profile" && w[2] == "import") || w[1] == "cluster" || w[1] == "schedule";
    if (!quick || q.command.find("...") != std::string::npos) continue;
    SCOPED_TRACE("README.md:" + std::to_string(q.line) + ": $ " + q.command);
    // A command reading what a longer one wrote (a measured profile, a run) is not run.
    bool reads_a_run = false;
    for (size_t i = 2; i < w.size(); ++i)
      reads_a_run = reads_a_run || (w[i].rfind("out/", 0) == 0 && w[i - 1] != "--output" && w[i - 1] != "-o" &&
                                    !fs::exists(out.path() + "/" + w[i].substr(4)));
    if (reads_a_run) continue;
    std::vector<std::string> args;
    int head = -1;  // `| head -N`
    for (size_t i = 1; i < w.size(); ++i) {
      if (w[i] == "|" && i + 2 < w.size() + 1 && w[i + 1] == "head") {
        head = w.size() > i + 2 ? std::abs(std::stoi(w[i + 2])) : 10;
        break;
      }
      // Outputs go to a temporary folder that stands for out/ (its folders made, as make
      // demo leaves them).
      if (w[i].rfind("out/", 0) == 0) {
        args.push_back(out.path() + "/" + w[i].substr(4));
        fs::create_directories(fs::path(args.back()).parent_path());
      } else {
        args.push_back(w[i]);
      }
    }
    const CliResult r = run_harp(args);
    ASSERT_EQ(r.rc, 0) << r.err;
    ++run;
    std::vector<std::string> printed;
    std::istringstream text(r.out);
    for (std::string line; std::getline(text, line);) {
      for (size_t at; (at = line.find(out.path() + "/")) != std::string::npos;)
        line.replace(at, out.path().size() + 1, "out/");
      printed.push_back(line);
      if (head > 0 && static_cast<int>(printed.size()) == head) break;
    }
    for (const std::string& quoted : q.output) {
      ++lines;
      bool found = false;
      for (const std::string& p : printed) found = found || same_line(quoted, p);
      EXPECT_TRUE(found) << "the README quotes\n  " << quoted << "\nand the command printed\n" << r.out;
    }
  }
  // The worked example (2 commands), profile import and compare (2), model show and compare (2).
  EXPECT_GE(run, 6);
  EXPECT_GE(lines, 25);
  std::cout << run << " commands run, " << lines << " quoted lines compared\n";
}

// The comparison itself: a changed figure, word or missing line is caught; the search's
// wall time and last-digit rounding are not differences.
TEST(ReadmeFigures, TheComparisonCatchesADriftedFigure) {
  const std::string printed = "      0  v100 (V100-32GB)      0-7  [0, 18)     8 x 1   8.5 / 28.8 GiB  analytic";
  EXPECT_TRUE(same_line(printed, printed));
  EXPECT_FALSE(same_line("      0  v100 (V100-32GB)      0-7  [0, 18)     8 x 1   7.0 / 28.8 GiB  analytic", printed));
  EXPECT_FALSE(same_line("      0  v100 (V100-32GB)      0-7  [0, 19)     8 x 1   8.5 / 28.8 GiB  analytic", printed));
  EXPECT_FALSE(same_line("      0  a100 (V100-32GB)      0-7  [0, 18)     8 x 1   8.5 / 28.8 GiB  analytic", printed));
  EXPECT_TRUE(
      same_line("search: 9.1 ms, 25 of 5,223 candidate periods", "search: 10.4 ms, 25 of 5223 candidate periods"));
  EXPECT_FALSE(
      same_line("search: 9.1 ms, 7 of 5223 candidate periods", "search: 10.4 ms, 25 of 5223 candidate periods"));
  EXPECT_TRUE(same_line("predicted 2.098 s", "predicted 2.099 s"));
  EXPECT_FALSE(same_line("predicted 2.098 s", "predicted 2.140 s"));
}

}  // namespace
}  // namespace harp::testing
