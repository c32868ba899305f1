// Reading rank 0's progress records (see progress.h).
#include "harp/launch/progress.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include "harp/common/document.h"
#include "harp/common/fields.h"

namespace harp::launch {

RunProgress read_progress(const std::string& out_dir, double since_unix) {
  RunProgress p;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const Json r = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object() || !r.contains(kProgressWallKey) || !r[kProgressWallKey].is_number()) continue;
    const double wall = r[kProgressWallKey].get<double>();
    if (wall < since_unix) continue;
    auto step_of = [&](const char* key) {
      const auto n = whole_number_in(r[key], 0, std::numeric_limits<int>::max());
      return n ? static_cast<int>(*n) : -1;
    };
    if (r.contains(kProgressDriftKey)) {
      DriftRecord d;
      d.after_steps = step_of(kProgressDriftKey);
      d.stage = step_of("stage");
      d.link = r.contains("link") ? step_of("link") : -1;
      d.ratio = r.contains("ratio") && r["ratio"].is_number() ? r["ratio"].get<double>() : -1.0;
      d.wall_unix_s = wall;
      auto numbers = [&](const char* key, std::vector<double>* v) {
        if (r.contains(key) && r[key].is_array())
          for (const Json& x : r[key]) v->push_back(x.is_number() ? x.get<double>() : -1.0);
      };
      numbers("stage_ratios", &d.stage_ratios);
      numbers("stage_measured_s", &d.stage_measured_s);
      numbers("stage_baseline_s", &d.stage_baseline_s);
      numbers("link_ratios", &d.link_ratios);
      numbers("link_measured_s", &d.link_measured_s);
      numbers("link_baseline_s", &d.link_baseline_s);
      if (d.after_steps >= 0 && (d.stage >= 0 || d.link >= 0) && d.ratio > 0) p.drifts.push_back(std::move(d));
      continue;
    }
    if (!r.contains("step")) continue;
    if (r.contains("iteration_s") && r["iteration_s"].is_number())
      p.step_s.emplace_back(step_of("step"), r["iteration_s"].get<double>());
    p.steps_done = std::max(p.steps_done, step_of("step") + 1);
    if (r.contains("link_probes") && r["link_probes"].is_array())
      for (const Json& x : r["link_probes"]) {
        if (!x.is_object() || !x.contains("a") || !x["a"].is_string() || !x.contains("b") || !x["b"].is_string() ||
            !x.contains("bytes") || !x["bytes"].is_number() || !x.contains("transit_s") || !x["transit_s"].is_number())
          continue;
        p.probes.push_back({step_of("step") + 1, x["a"].get<std::string>(), x["b"].get<std::string>(),
                            x["bytes"].get<double>(), x["transit_s"].get<double>()});
      }
    if (p.first_step_unix < 0) p.first_step_unix = wall;
    if (r.contains(kProgressResumedKey)) p.resumed_step = step_of(kProgressResumedKey);
    if (r.contains(kProgressStoppedKey)) p.stopped_step = step_of(kProgressStoppedKey);
  }
  return p;
}

double median_step_s(const RunProgress& p, int first, int last) {
  std::vector<double> v;
  for (const auto& [step, s] : p.step_s)
    if (step >= first && step < last) v.push_back(s);
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace harp::launch
