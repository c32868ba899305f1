// Profile DB storage and JSON I/O. Lookups are exact: the cost model decides what to do
// when an entry is missing (fall back to the analytic estimate, or report it).
#include "harp/profile/profile_db.h"

#include "harp/common/fields.h"

namespace harp::profile {

void ProfileDb::put(const ProfileEntry& entry) { entries_[entry.key] = entry; }

std::optional<ProfileEntry> ProfileDb::find(const ProfileKey& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void ProfileDb::merge(const ProfileDb& other) {
  for (const auto& [k, e] : other.entries_) entries_[k] = e;
}

std::vector<ProfileEntry> ProfileDb::entries() const {
  std::vector<ProfileEntry> out;
  for (const auto& [k, e] : entries_) out.push_back(e);
  return out;
}

StatusOr<ProfileDb> parse_profile_db(const Json& node, const std::string& file) {
  FieldReader r(node, file, "");
  if (r.failed()) return r.finish();
  std::int64_t version = r.integer("version", 1);
  if (!r.failed() && version != 1)
    r.fail("version", std::to_string(version), "is not a supported profile version",
           "write `\"version\": 1`");
  const Json* entries = r.get("entries");
  HARP_RETURN_IF_ERROR(r.finish());
  ProfileDb db;
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
    e.fwd_s = er.non_negative("fwd_s");
    e.bwd_s = er.non_negative("bwd_s");
    e.activation_bytes = er.non_negative("activation_bytes", 0.0);
    e.output_bytes = er.non_negative("output_bytes", 0.0);
    e.param_bytes = er.non_negative("param_bytes", 0.0);
    e.workspace_bytes = er.non_negative("workspace_bytes", 0.0);
    e.source = er.choice("source", {"measured", "analytic"}, std::string("measured"));
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
  Json entries = Json::array();
  for (const auto& e : db.entries())
    entries.push_back({{"device", e.key.device},
                       {"signature", e.key.signature},
                       {"microbatch_size", e.key.microbatch_size},
                       {"tp", e.key.tp},
                       {"layer", e.layer},
                       {"fwd_s", e.fwd_s},
                       {"bwd_s", e.bwd_s},
                       {"activation_bytes", e.activation_bytes},
                       {"output_bytes", e.output_bytes},
                       {"param_bytes", e.param_bytes},
                       {"workspace_bytes", e.workspace_bytes},
                       {"source", e.source}});
  return {{"version", 1}, {"entries", entries}};
}

Status save_profile_db(const ProfileDb& db, const std::string& file) {
  return write_text_file_atomic(file, profile_db_to_json(db).dump(2) + "\n");
}

}  // namespace harp::profile
