// The profile database, data side (torch-free): measured or analytic per-layer costs
// keyed by (device type, layer signature, microbatch size, tp). The profiler (a later
// subsystem, links libtorch) writes it; the cost model reads it. Format in
// docs/file_formats.md. Databases from several machines merge: each device type
// profiles itself.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/common/units.h"

namespace harp::profile {

struct ProfileKey {
  std::string device;
  std::string signature;
  int microbatch_size = 1;
  int tp = 1;
  bool operator<(const ProfileKey& o) const {
    return std::tie(device, signature, microbatch_size, tp) <
           std::tie(o.device, o.signature, o.microbatch_size, o.tp);
  }
};

struct ProfileEntry {
  ProfileKey key;
  std::string layer;        // a readable name of one layer with this signature
  Seconds fwd_s = 0, bwd_s = 0;
  Bytes activation_bytes = 0, output_bytes = 0, param_bytes = 0, workspace_bytes = 0;
  std::string source = "measured";  // measured | analytic
};

class ProfileDb {
 public:
  // Adds or replaces the entry with the same key.
  void put(const ProfileEntry& entry);
  // Entry for the key, if present.
  std::optional<ProfileEntry> find(const ProfileKey& key) const;
  // Adds every entry of `other`; on a key present in both, `other` wins.
  void merge(const ProfileDb& other);
  size_t size() const { return entries_.size(); }
  std::vector<ProfileEntry> entries() const;

 private:
  std::map<ProfileKey, ProfileEntry> entries_;
};

StatusOr<ProfileDb> parse_profile_db(const Json& node, const std::string& file);
StatusOr<ProfileDb> load_profile_db(const std::string& file);
Json profile_db_to_json(const ProfileDb& db);
Status save_profile_db(const ProfileDb& db, const std::string& file);

}  // namespace harp::profile
