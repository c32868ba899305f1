#include "harp/plan/plan.h"

namespace harp::plan {

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kHarp1F1B: return "harp-1f1b";
  }
  return "?";
}

bool parse_schedule_kind(const std::string& name, ScheduleKind* out) {
  for (auto k : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kHarp1F1B}) {
    if (name == schedule_kind_name(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

}  // namespace harp::plan
