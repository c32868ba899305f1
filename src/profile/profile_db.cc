// Profile DB storage and JSON I/O. Lookups are exact: the cost model decides what to do
// when an entry is missing (fall back to the analytic estimate, or report it).
#include "harp/profile/profile_db.h"

#include <cstdlib>
#include <limits>

#include "harp/common/fields.h"
#include "harp/common/quantities.h"

namespace harp::profile {

void ProfileDb::put(const ProfileEntry& entry) { entries_[entry.key] = entry; }

std::optional<ProfileEntry> ProfileDb::find(const ProfileKey& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::optional<ProfileEntry> ProfileDb::nearest(const std::string& device, const std::string& signature, int samples,
                                                int tp) const {
  // Keys order by (device, signature, ...): one signature's entries are adjacent.
  const ProfileEntry* best = nullptr;
  for (auto it = entries_.lower_bound({device, signature, std::numeric_limits<int>::min(), 0});
       it != entries_.end() && it->first.device == device && it->first.signature == signature; ++it) {
    if (it->first.tp != tp) continue;
    if (best == nullptr ||
        std::abs(it->first.microbatch_size - samples) < std::abs(best->key.microbatch_size - samples))
      best = &it->second;
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

int ProfileDb::merge(const ProfileDb& other) {
  int replaced = 0;
  for (const auto& [k, e] : other.entries_) {
    replaced += entries_.count(k) ? 1 : 0;
    entries_[k] = e;
  }
  for (const auto& [name, d] : other.devices_) devices_[name] = d;
  return replaced;
}

std::vector<ProfileEntry> ProfileDb::entries() const {
  std::vector<ProfileEntry> out;
  for (const auto& [k, e] : entries_) out.push_back(e);
  return out;
}

const DeviceProfile* ProfileDb::device(const std::string& name) const {
  auto it = devices_.find(name);
  return it == devices_.end() ? nullptr : &it->second;
}

const StageFixed* DeviceProfile::fixed_for(int samples) const {
  const StageFixed* best = nullptr;
  for (const StageFixed& f : stage_fixed) {
    const int d = std::abs(f.microbatch_size - samples);
    if (best == nullptr || d < std::abs(best->microbatch_size - samples) ||
        (d == std::abs(best->microbatch_size - samples) && f.microbatch_size < best->microbatch_size))
      best = &f;
  }
  return best;
}

int ProfileDb::entries_of(const std::string& device) const {
  int n = 0;
  for (const auto& [k, e] : entries_) n += k.device == device ? 1 : 0;
  return n;
}

namespace {

Status parse_stage_fixed(const Json& list, const std::string& file, size_t device, DeviceProfile* d) {
  const std::string path = "devices[" + std::to_string(device) + "].stage_fixed";
  if (!list.is_array())
    return field_error(file, path, list.dump(), "must be a list", "write `\"stage_fixed\": []` or leave it out");
  for (size_t k = 0; k < list.size(); ++k) {
    FieldReader r(list[k], file, path + "[" + std::to_string(k) + "]");
    if (r.failed()) return r.finish();
    StageFixed f;
    f.microbatch_size = static_cast<int>(r.integer("microbatch_size", 1, 1, 1 << 20));
    f.fwd_s = read_quantity(r, "fwd_s", quantity::kFixedSeconds);
    f.bwd_s = read_quantity(r, "bwd_s", quantity::kFixedSeconds);
    f.bwd_weight_s = read_quantity(r, "bwd_weight_s", quantity::kFixedSeconds, 0.0);
    f.probe_layers = static_cast<int>(r.integer("probe_layers", 0, 0, 1 << 20));
    for (const StageFixed& other : d->stage_fixed)
      if (!r.failed() && other.microbatch_size == f.microbatch_size)
        r.fail("microbatch_size", std::to_string(f.microbatch_size), "appears twice in stage_fixed",
               "keep one entry per microbatch size");
    HARP_RETURN_IF_ERROR(r.finish());
    d->stage_fixed.push_back(f);
  }
  return Status();
}

Status parse_devices(const Json& devices, const std::string& file, ProfileDb* db) {
  if (!devices.is_array())
    return field_error(file, "devices", devices.dump(), "must be a list", "write `\"devices\": []`");
  for (size_t i = 0; i < devices.size(); ++i) {
    FieldReader r(devices[i], file, "devices[" + std::to_string(i) + "]");
    if (r.failed()) return r.finish();
    DeviceProfile d;
    d.device = r.string("device");
    d.machine = r.string("machine", "");
    d.libtorch = r.string("libtorch", "");
    d.dtype = r.string("dtype", "");
    d.date = r.string("date", "");
    d.model = r.string("model", "");
    d.threads = static_cast<int>(r.integer("threads", 0, 0, 4096));
    d.emulated_slowdown = read_quantity(r, "emulated_slowdown", quantity::kSlowdown, 1.0);
    // Absent: -1, "not measured" (the analytic estimate is used); given: in range.
    d.optimizer_s_per_param_byte =
        read_quantity(r, "optimizer_s_per_param_byte", quantity::kSecondsPerParamByte, -1.0);
    d.optimizer_fixed_s = read_quantity(r, "optimizer_fixed_s", quantity::kSeconds, 0.0);
    d.source = r.choice("source", {"measured", "imported"}, std::string("measured"));
    const Json* fixed = r.get("stage_fixed");
    HARP_RETURN_IF_ERROR(r.finish());
    if (fixed != nullptr) HARP_RETURN_IF_ERROR(parse_stage_fixed(*fixed, file, i, &d));
    db->put_device(d);
  }
  return Status();
}

}  // namespace

StatusOr<ProfileDb> parse_profile_db(const Json& node, const std::string& file) {
  FieldReader r(node, file, "");
  if (r.failed()) return r.finish();
  std::int64_t version = r.integer("version", 1);
  if (!r.failed() && version != 1)
    r.fail("version", std::to_string(version), "is not a supported profile version",
           "write `\"version\": 1`");
  const Json* entries = r.get("entries");
  const Json* devices = r.get("devices");
  HARP_RETURN_IF_ERROR(r.finish());
  ProfileDb db;
  if (devices != nullptr) HARP_RETURN_IF_ERROR(parse_devices(*devices, file, &db));
  if (entries == nullptr) return db;
  if (!entries->is_array())
    return field_error(file, "entries", entries->dump(), "must be a list", "write `\"entries\": []`");
  for (size_t i = 0; i < entries->size(); ++i) {
    FieldReader er((*entries)[i], file, "entries[" + std::to_string(i) + "]");
    if (er.failed()) return er.finish();
    ProfileEntry e;
    e.key.device = er.string("device");
    e.key.signature = er.string("signature");
    e.key.microbatch_size = static_cast<int>(er.integer("microbatch_size", 1));
    e.key.tp = static_cast<int>(er.integer("tp", 1, 1));
    e.layer = er.string("layer", "");
    e.fwd_s = read_quantity(er, "fwd_s", quantity::kSeconds);
    e.bwd_s = read_quantity(er, "bwd_s", quantity::kSeconds);
    e.bwd_weight_s = er.get("bwd_weight_s") ? read_quantity(er, "bwd_weight_s", quantity::kSeconds) : -1.0;
    if (!er.failed() && e.bwd_weight_s > e.bwd_s)
      er.fail("bwd_weight_s", Json(e.bwd_weight_s).dump(), "must not exceed bwd_s (" + Json(e.bwd_s).dump() + ")",
              "give the part of bwd_s the weight gradients take, or leave it out");
    e.activation_bytes = read_quantity(er, "activation_bytes", quantity::kBytes, 0.0);
    e.output_bytes = read_quantity(er, "output_bytes", quantity::kBytes, 0.0);
    e.param_bytes = read_quantity(er, "param_bytes", quantity::kBytes, 0.0);
    e.workspace_bytes = read_quantity(er, "workspace_bytes", quantity::kBytes, 0.0);
    e.peak_bytes = read_quantity(er, "peak_bytes", quantity::kBytes, 0.0);
    e.fwd_spread = er.non_negative("fwd_spread", 0.0);
    e.bwd_spread = er.non_negative("bwd_spread", 0.0);
    e.repeats = static_cast<int>(er.integer("repeats", 0, 0));
    e.source = er.choice("source", {"measured", "analytic", "imported"}, std::string("measured"));
    HARP_RETURN_IF_ERROR(er.finish());
    db.put(e);
  }
  return db;
}

StatusOr<ProfileDb> load_profile_db(const std::string& file) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  return parse_profile_db(doc, file);
}

Json profile_db_to_json(const ProfileDb& db) {
  Json devices = Json::array();
  for (const auto& [name, d] : db.devices()) {
    Json out = {{"device", d.device},     {"machine", d.machine},
                {"libtorch", d.libtorch}, {"dtype", d.dtype},
                {"date", d.date},         {"model", d.model},
                {"threads", d.threads},   {"emulated_slowdown", d.emulated_slowdown},
                {"source", d.source}};
    // Unknown (< 0) is left out: the reader takes absent as unknown and refuses a negative.
    if (d.optimizer_s_per_param_byte >= 0) out["optimizer_s_per_param_byte"] = d.optimizer_s_per_param_byte;
    if (d.optimizer_fixed_s != 0) out["optimizer_fixed_s"] = d.optimizer_fixed_s;
    if (!d.stage_fixed.empty()) {
      Json fixed = Json::array();
      for (const StageFixed& f : d.stage_fixed)
        fixed.push_back({{"microbatch_size", f.microbatch_size},
                         {"fwd_s", f.fwd_s},
                         {"bwd_s", f.bwd_s},
                         {"bwd_weight_s", f.bwd_weight_s},
                         {"probe_layers", f.probe_layers}});
      out["stage_fixed"] = fixed;
    }
    devices.push_back(std::move(out));
  }
  Json entries = Json::array();
  for (const auto& e : db.entries())
    entries.push_back({{"device", e.key.device},
                       {"signature", e.key.signature},
                       {"microbatch_size", e.key.microbatch_size},
                       {"tp", e.key.tp},
                       {"layer", e.layer},
                       {"fwd_s", e.fwd_s},
                       {"bwd_s", e.bwd_s},
                       {"fwd_spread", e.fwd_spread},
                       {"bwd_spread", e.bwd_spread},
                       {"repeats", e.repeats},
                       {"activation_bytes", e.activation_bytes},
                       {"output_bytes", e.output_bytes},
                       {"param_bytes", e.param_bytes},
                       {"workspace_bytes", e.workspace_bytes},
                       {"peak_bytes", e.peak_bytes},
                       {"source", e.source}});
  for (size_t k = 0; k < db.entries().size(); ++k)
    if (db.entries()[k].bwd_weight_s >= 0) entries[k]["bwd_weight_s"] = db.entries()[k].bwd_weight_s;
  return {{"version", 1}, {"devices", devices}, {"entries", entries}};
}

Status save_profile_db(const ProfileDb& db, const std::string& file) {
  // Nothing is written that the reader would refuse (an imported time of 1e296 s, say):
  // the document is read back first, and its first bad field is the error.
  const Json doc = profile_db_to_json(db);
  if (auto back = parse_profile_db(doc, shown_path(file)); !back.ok())
    return invalid_argument("the profile to write holds what harp cannot read back (" +
                            std::string(back.status().message()) + "); nothing was written: fix the source figures");
  return write_text_file_atomic(file, doc.dump(2) + "\n");
}

}  // namespace harp::profile
