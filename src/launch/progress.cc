// Reading rank 0's progress records (see progress.h).
#include "harp/launch/progress.h"

#include <algorithm>
#include <fstream>

#include "harp/common/document.h"

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
    auto step_of = [&](const char* key) { return r[key].is_number_integer() ? r[key].get<int>() : -1; };
    if (!r.contains("step")) continue;
    p.steps_done = std::max(p.steps_done, step_of("step") + 1);
    if (p.first_step_unix < 0) p.first_step_unix = wall;
    if (r.contains(kProgressResumedKey)) p.resumed_step = step_of(kProgressResumedKey);
    if (r.contains(kProgressStoppedKey)) p.stopped_step = step_of(kProgressStoppedKey);
  }
  return p;
}

}  // namespace harp::launch
