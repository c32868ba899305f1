// The profile database, data side (torch-free): measured or analytic per-layer costs
// keyed by (device type, layer signature, microbatch size, tp), and per device type the
// circumstances of the measurement (machine, libtorch, threads, dtype, date, emulated
// slowdown) and the optimizer step's time per parameter byte. The profiler (src/profiler,
// links libtorch) writes it; `harp profile import` converts other tools' measurements
// into it; the cost model reads it. Format in docs/file_formats.md. Databases from
// several machines merge: each device type profiles itself.
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
  // Of bwd_s, the weight-gradient products timed apart (a split backward's W, measured
  // with the products queued: runtime/nn/weight_grad.h); < 0: not measured.
  Seconds bwd_weight_s = -1;
  // Per microbatch (not per sample), as measured for key.microbatch_size samples.
  Bytes activation_bytes = 0, output_bytes = 0, param_bytes = 0, workspace_bytes = 0;
  Bytes peak_bytes = 0;     // peak above the inputs during forward + backward; 0: unknown
  double fwd_spread = 0, bwd_spread = 0;  // half the interquartile range / median
  int repeats = 0;          // timed repetitions behind the medians; 0: unknown
  std::string source = "measured";  // measured | analytic | imported
};

// What a stage costs per call beyond the sum of its layers' entries, for one microbatch
// size: a stage of layers [a, b) runs sum(entries of a..b-1) - (b - a - 1) x fixed, i.e.
// each layer's entry less `fixed`, plus `fixed` once. A one-layer measurement is a
// one-layer stage; the profiler measures a range of `probe_layers` consecutive layers
// beside its layers' entries and solves for it (profiler.h). Negative when the range ran
// slower than its layers alone.
struct StageFixed {
  int microbatch_size = 1;
  Seconds fwd_s = 0, bwd_s = 0, bwd_weight_s = 0;  // per forward, backward (of it, W)
  int probe_layers = 0;                            // the measured range's length; 0: unknown
};

// How one device type was measured. Every field is optional in the file.
struct DeviceProfile {
  std::string device;
  std::string machine;       // host name, or the tool an import came from
  std::string libtorch;      // version string
  std::string dtype;         // float32 | float64 | bfloat16 | float16 ...
  std::string date;          // ISO 8601, UTC
  std::string model;         // the model's shape (model::ModelSpec::shape_key-like), readable
  int threads = 0;           // intra-op threads; 0: unknown
  double emulated_slowdown = 1;  // > 1: the times include the cluster file's declared factor
  Seconds optimizer_s_per_param_byte = -1;  // per fp16 parameter byte of the model spec; < 0: unknown
  Seconds optimizer_fixed_s = 0;            // >= 0: per step and stage beyond that (per-call work)
  std::vector<StageFixed> stage_fixed;      // by microbatch size; empty: not measured (0)
  // The entry of the microbatch size nearest `samples` (the smaller of two as near);
  // nullptr when none was measured.
  const StageFixed* fixed_for(int samples) const;
  std::string source = "measured";          // measured | imported
};

class ProfileDb {
 public:
  // Adds or replaces the entry with the same key.
  void put(const ProfileEntry& entry);
  // Entry for the key, if present.
  std::optional<ProfileEntry> find(const ProfileKey& key) const;
  // The entry of (device, signature, tp) whose microbatch size is nearest `samples` (the
  // smaller of two as near), if there is one.
  std::optional<ProfileEntry> nearest(const std::string& device, const std::string& signature, int samples,
                                      int tp) const;
  // Adds every entry and device record of `other`; on a key present in both, `other`
  // wins. Returns how many entries of this DB `other` replaced.
  int merge(const ProfileDb& other);
  size_t size() const { return entries_.size(); }
  std::vector<ProfileEntry> entries() const;

  void put_device(const DeviceProfile& device) { devices_[device.device] = device; }
  const DeviceProfile* device(const std::string& name) const;
  const std::map<std::string, DeviceProfile>& devices() const { return devices_; }
  // Entries of one device type.
  int entries_of(const std::string& device) const;

 private:
  std::map<ProfileKey, ProfileEntry> entries_;
  std::map<std::string, DeviceProfile> devices_;
};

StatusOr<ProfileDb> parse_profile_db(const Json& node, const std::string& file);
StatusOr<ProfileDb> load_profile_db(const std::string& file);
Json profile_db_to_json(const ProfileDb& db);
// Atomic: a temporary file renamed over `file`.
Status save_profile_db(const ProfileDb& db, const std::string& file);

}  // namespace harp::profile
