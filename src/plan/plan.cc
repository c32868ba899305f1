#include "harp/plan/plan.h"

#include <set>

namespace harp::plan {

namespace {
constexpr ScheduleKind kAllScheduleKinds[] = {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kHarp1F1B,
                                              ScheduleKind::kZbH1,  ScheduleKind::kZbH2, ScheduleKind::kHarpZb};
}  // namespace

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kHarp1F1B: return "harp-1f1b";
    case ScheduleKind::kZbH1: return "zb-h1";
    case ScheduleKind::kZbH2: return "zb-h2";
    case ScheduleKind::kHarpZb: return "harp-zb";
  }
  return "?";
}

const std::vector<std::string>& schedule_kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (auto k : kAllScheduleKinds) out.push_back(schedule_kind_name(k));
    return out;
  }();
  return names;
}

bool parse_schedule_kind(const std::string& name, ScheduleKind* out) {
  for (auto k : kAllScheduleKinds) {
    if (name == schedule_kind_name(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kHarp: return "harp";
    case Strategy::kHomogeneous: return "homogeneous";
    case Strategy::kUniform: return "uniform";
  }
  return "?";
}

bool parse_strategy(const std::string& name, Strategy* out) {
  for (Strategy s : kAllStrategies) {
    if (name == strategy_name(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

std::string Stage::replica_summary() const {
  std::string out;
  for (size_t i = 0; i < replica_devices.size();) {
    size_t j = i;
    while (j < replica_devices.size() && replica_devices[j] == replica_devices[i]) ++j;
    out += (out.empty() ? "" : " + ") + std::to_string(j - i) + " x " + replica_devices[i];
    i = j;
  }
  return out;
}

std::string Stage::shares_ratio() const {
  std::string out;
  for (size_t d = 0; d < shares.size(); ++d) out += (d == 0 ? "" : ":") + std::to_string(shares[d]);
  return out;
}

std::vector<int> Plan::used_devices() const {
  std::set<int> used;
  for (const Stage& st : stages) used.insert(st.devices.begin(), st.devices.end());
  return {used.begin(), used.end()};
}

int Plan::node_of_device(int device) const {
  for (const Stage& st : stages)
    for (size_t i = 0; i < st.devices.size() && i < st.nodes.size(); ++i)
      if (st.devices[i] == device) return st.nodes[i];
  return -1;
}

std::vector<int> Plan::ranks_per_node() const {
  std::vector<int> out;
  for (int d : used_devices()) {
    const int n = node_of_device(d);
    if (n < 0) return {};
    if (static_cast<int>(out.size()) <= n) out.resize(static_cast<size_t>(n) + 1, 0);
    ++out[static_cast<size_t>(n)];
  }
  return out;
}

}  // namespace harp::plan
