// The text form of actions and schedules (`2SEND_F5`, "rank 2: 2F0 2F1 ..."). Parsing is
// strict so a hand-edited schedule file fails on the token that is wrong, not later in
// the validator with a confusing deadlock.
#include "harp/schedule/action.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace harp::schedule {
namespace {

constexpr ActionKind kAllKinds[] = {ActionKind::kF,     ActionKind::kB,     ActionKind::kSendF,
                                    ActionKind::kRecvF, ActionKind::kSendB, ActionKind::kRecvB,
                                    ActionKind::kReduceGrad, ActionKind::kStep, ActionKind::kI,
                                    ActionKind::kW};

bool has_microbatch(ActionKind kind) {
  return kind != ActionKind::kReduceGrad && kind != ActionKind::kStep;
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Reads a run of digits starting at *pos; false if there is none or it overflows int.
bool read_number(const std::string& text, size_t* pos, int* out) {
  const size_t begin = *pos;
  long long value = 0;
  while (*pos < text.size() && is_digit(text[*pos])) {
    value = value * 10 + (text[*pos] - '0');
    if (value > 1'000'000'000) return false;
    ++*pos;
  }
  if (*pos == begin) return false;
  *out = static_cast<int>(value);
  return true;
}

Status bad_token(const std::string& text, const std::string& why) {
  return invalid_argument("bad action \"" + text + "\": " + why +
                          " (expected <stage><kind>[<microbatch>], e.g. 2F5, 3RECV_F5, "
                          "2REDUCE_GRAD; kinds F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, "
                          "REDUCE_GRAD, STEP)");
}

std::vector<std::string> split_tokens(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> tokens;
  std::string t;
  while (in >> t) tokens.push_back(t);
  return tokens;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kF: return "F";
    case ActionKind::kB: return "B";
    case ActionKind::kSendF: return "SEND_F";
    case ActionKind::kRecvF: return "RECV_F";
    case ActionKind::kSendB: return "SEND_B";
    case ActionKind::kRecvB: return "RECV_B";
    case ActionKind::kReduceGrad: return "REDUCE_GRAD";
    case ActionKind::kStep: return "STEP";
    case ActionKind::kI: return "I";
    case ActionKind::kW: return "W";
  }
  return "?";
}

std::string to_string(const Action& a) {
  std::string s = std::to_string(a.stage) + action_kind_name(a.kind);
  if (has_microbatch(a.kind)) s += std::to_string(a.microbatch);
  return s;
}

StatusOr<Action> parse_action(const std::string& text) {
  size_t pos = 0;
  Action a;
  if (!read_number(text, &pos, &a.stage))
    return bad_token(text, "it does not start with a stage number");
  const size_t kind_begin = pos;
  while (pos < text.size() && !is_digit(text[pos])) ++pos;
  const std::string kind_text = text.substr(kind_begin, pos - kind_begin);
  const auto* kind = std::find_if(std::begin(kAllKinds), std::end(kAllKinds), [&](ActionKind k) {
    return kind_text == action_kind_name(k);
  });
  if (kind == std::end(kAllKinds)) return bad_token(text, "unknown kind \"" + kind_text + "\"");
  a.kind = *kind;
  if (has_microbatch(a.kind)) {
    if (!read_number(text, &pos, &a.microbatch))
      return bad_token(text, std::string(action_kind_name(a.kind)) + " needs a microbatch number");
  } else {
    a.microbatch = -1;
  }
  if (pos != text.size())
    return bad_token(text, "unexpected trailing text \"" + text.substr(pos) + "\"");
  return a;
}

size_t Schedule::total_actions() const {
  size_t n = 0;
  for (const auto& rank : actions) n += rank.size();
  return n;
}

std::string schedule_to_text(const Schedule& s) {
  std::string out;
  for (size_t r = 0; r < s.actions.size(); ++r) {
    out += "rank " + std::to_string(r) + ":";
    for (const Action& a : s.actions[r]) out += " " + to_string(a);
    out += "\n";
  }
  return out;
}

StatusOr<Schedule> parse_schedule_text(const std::string& text) {
  Schedule s;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  int max_microbatch = -1;
  while (std::getline(in, line)) {
    ++line_no;
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = "schedule line " + std::to_string(line_no);
    const size_t colon = line.find(':');
    const int expected_rank = static_cast<int>(s.actions.size());
    const std::string expected_prefix = "rank " + std::to_string(expected_rank);
    if (colon == std::string::npos || trim(line.substr(0, colon)) != expected_prefix)
      return invalid_argument(where + ": expected \"" + expected_prefix +
                              ": <actions>\" (ranks in order from 0), got \"" + line + "\"");
    std::vector<Action> actions;
    for (const std::string& token : split_tokens(line.substr(colon + 1))) {
      StatusOr<Action> a = parse_action(token);
      if (!a.ok()) return invalid_argument(where + ": " + a.status().message());
      max_microbatch = std::max(max_microbatch, a->microbatch);
      actions.push_back(*a);
    }
    s.actions.push_back(std::move(actions));
  }
  s.num_stages = static_cast<int>(s.actions.size());
  s.num_microbatches = max_microbatch + 1;
  return s;
}

std::string short_name(const Action& a) {
  std::string name = action_kind_name(a.kind);
  if (a.microbatch >= 0) name += std::to_string(a.microbatch);
  return name;
}

}  // namespace harp::schedule
