#include "harp/cluster/cluster_io.h"

#include <set>

#include "harp/common/fields.h"
#include "harp/common/format.h"
#include "harp/common/quantities.h"

namespace harp::cluster {
namespace {

// Far beyond any cluster; they keep every count and id inside an int.
constexpr std::int64_t kMaxNodes = 1 << 16, kMaxDevicesPerNode = 1 << 10;
// What the planner is sized for (docs/file_formats.md, Limits: measured times there).
constexpr std::int64_t kMaxDevices = 1 << 16, kMaxSubclusters = 1 << 10;

constexpr const char* kVersionFix = "set `version: 1` at the top of the file";

// A link is written {bandwidth_gbps, latency_us} inside a subcluster and
// {bandwidth_gbps, latency_ms} between subclusters: the usual magnitudes of each.
Link read_link(FieldReader& r, const std::string& latency_key) {
  Link l;
  l.bandwidth_gbps = read_quantity(r, "bandwidth_gbps", quantity::kBandwidthGbps);
  const bool in_us = latency_key == "latency_us";
  double lat = r.non_negative(latency_key, 0.0);
  l.latency_s = in_us ? us_to_s(lat) : ms_to_s(lat);
  if (!r.failed() && !in_range(quantity::kLatencyS, l.latency_s))
    r.fail(latency_key, number_text(lat), in_us ? "a link latency must be between 0 and 1e+07 us (10 s)"
                                                : "a link latency must be between 0 and 10000 ms (10 s)",
           in_us ? "use e.g. 5 (a fast link) (docs/file_formats.md, Ranges)"
                 : "use e.g. 0.5 (a slow link) (docs/file_formats.md, Ranges)");
  return l;
}

Status read_node_link(FieldReader& parent, const std::string& key, bool required, Link* out) {
  const Json* node = parent.get(key);
  if (node == nullptr) {
    if (required)
      return field_error(parent.file(), parent.path_of(key), "",
                         key == "intra_node" ? "is required when devices_per_node > 1" : "is required when nodes > 1",
                         "add `" + key + ": {bandwidth_gbps: 100, latency_us: 5}`");
    return Status();
  }
  FieldReader r(*node, parent.file(), parent.path_of(key));
  *out = read_link(r, "latency_us");
  return r.finish();
}

Status read_device(const Json& node, const std::string& file, const std::string& path,
                   DeviceType* d) {
  FieldReader r(node, file, path);
  d->name = r.string("name");
  d->peak_tflops = read_quantity(r, "peak_tflops", quantity::kPeakTflops);
  d->fp32_tflops = read_quantity(r, "fp32_tflops", quantity::kPeakTflops, 0.0);
  d->memory_gib = read_quantity(r, "memory_gib", quantity::kMemoryGib);
  d->memory_bandwidth_gbs = read_quantity(r, "memory_bandwidth_gbs", quantity::kMemoryBandwidthGbs);
  d->emulated_slowdown = read_quantity(r, "emulated_slowdown", quantity::kSlowdown, 1.0);
  d->compute_capability = r.non_negative("compute_capability", 0.0);
  if (!r.failed() && d->compute_capability >= 100)
    r.fail("compute_capability", fmt("%g", d->compute_capability), "is not a CUDA compute capability",
           "write it as major.minor, e.g. 7.0 for V100, 8.0 for A100, 9.0 for H100, or leave it out");
  // Without a word, a CUDA device below 8.0 has no bfloat16 (Volta, Turing), others do.
  d->bfloat16 = r.boolean("bfloat16", d->compute_capability == 0.0 || d->compute_capability >= 8.0);
  return r.finish();
}

}  // namespace

StatusOr<Cluster> parse_cluster(const Json& node, const std::string& file,
                                const std::string& path) {
  FieldReader r(node, file, path);
  if (r.failed()) return r.finish();
  Cluster c;
  std::int64_t version = r.integer("version", 1, 1);
  if (!r.failed() && version != 1)
    r.fail("version", std::to_string(version), "is not a supported version", kVersionFix);
  c.name = r.string("name", "cluster");
  if (r.failed()) return r.finish();

  // User device entries first: they may shadow nothing built in, to keep names unique.
  if (const Json* devs = r.get("devices")) {
    std::string dpath = r.path_of("devices");
    if (!devs->is_array())
      return field_error(file, dpath, devs->dump(), "must be a list of device entries",
                         "write `devices: [{name: X, peak_tflops: ..., memory_gib: ..., "
                         "memory_bandwidth_gbs: ...}]`");
    for (size_t i = 0; i < devs->size(); ++i) {
      DeviceType d;
      std::string ipath = join_path(dpath, "[" + std::to_string(i) + "]");
      HARP_RETURN_IF_ERROR(read_device((*devs)[i], file, ipath, &d));
      if (find_builtin_device(d.name) || c.devices.count(d.name))
        return field_error(file, join_path(ipath, "name"), Json(d.name).dump(),
                           "is already defined (built in or earlier in this list)",
                           "give the device a new name");
      c.devices[d.name] = d;
    }
  }

  const Json* subs = r.get("subclusters");
  std::string spath = r.path_of("subclusters");
  if (subs == nullptr || !subs->is_array() || subs->empty())
    return field_error(file, spath, subs ? subs->dump() : "",
                       "must be a non-empty list of subclusters",
                       "add at least one `{name, device, nodes, devices_per_node, intra_node}`");
  if (static_cast<std::int64_t>(subs->size()) > kMaxSubclusters)
    return field_error(file, spath, "a list of " + std::to_string(subs->size()),
                       "has more than " + std::to_string(kMaxSubclusters) + " subclusters",
                       "merge subclusters of one device type and link");
  std::set<std::string> names;
  std::int64_t devices = 0;
  for (size_t i = 0; i < subs->size(); ++i) {
    std::string ipath = join_path(spath, "[" + std::to_string(i) + "]");
    FieldReader sr((*subs)[i], file, ipath);
    if (sr.failed()) return sr.finish();
    Subcluster s;
    s.name = sr.string("name");
    s.device = sr.string("device");
    s.nodes = static_cast<int>(sr.integer("nodes", 1, std::nullopt, kMaxNodes));
    s.devices_per_node = static_cast<int>(sr.integer("devices_per_node", 1, std::nullopt, kMaxDevicesPerNode));
    if (sr.failed()) return sr.finish();
    devices += static_cast<std::int64_t>(s.nodes) * s.devices_per_node;
    if (devices > kMaxDevices)
      return field_error(file, ipath, std::to_string(s.nodes) + " x " + std::to_string(s.devices_per_node) + " devices",
                         "brings the cluster past " + std::to_string(kMaxDevices) + " devices in all",
                         "describe at most " + std::to_string(kMaxDevices) + " devices (plan a part of the cluster)");
    if (!names.insert(s.name).second)
      return field_error(file, join_path(ipath, "name"), Json(s.name).dump(),
                         "is used by another subcluster", "give each subcluster its own name");
    if (!c.devices.count(s.device)) {
      auto builtin = find_builtin_device(s.device);
      if (!builtin)
        return field_error(file, join_path(ipath, "device"), Json(s.device).dump(),
                           "is not a known device type",
                           "use a built-in device (" + builtin_device_names() +
                               ") or define it under `devices:`");
      c.devices[s.device] = *builtin;
    }
    HARP_RETURN_IF_ERROR(read_node_link(sr, "intra_node", s.devices_per_node > 1, &s.intra_node));
    HARP_RETURN_IF_ERROR(read_node_link(sr, "inter_node", s.nodes > 1, &s.inter_node));
    HARP_RETURN_IF_ERROR(sr.finish());
    c.subclusters.push_back(s);
  }

  if (const Json* links = r.get("links")) {
    std::string lpath = r.path_of("links");
    if (!links->is_array())
      return field_error(file, lpath, links->dump(), "must be a list of links",
                         "write `links: [{between: [a, b], bandwidth_gbps: 5, latency_ms: 1}]`");
    for (size_t i = 0; i < links->size(); ++i) {
      std::string ipath = join_path(lpath, "[" + std::to_string(i) + "]");
      FieldReader lr((*links)[i], file, ipath);
      if (lr.failed()) return lr.finish();
      SubclusterLink l;
      const Json* between = lr.get("between");
      if (between == nullptr || !between->is_array() || between->size() != 2 ||
          !(*between)[0].is_string() || !(*between)[1].is_string())
        return field_error(file, join_path(ipath, "between"), between ? between->dump() : "",
                           "must name exactly two subclusters", "write `between: [a, b]`");
      l.a = (*between)[0].get<std::string>();
      l.b = (*between)[1].get<std::string>();
      for (const auto& n : {l.a, l.b})
        if (!names.count(n))
          return field_error(file, join_path(ipath, "between"), between->dump(),
                             "names an unknown subcluster `" + n + "`",
                             "use names from `subclusters:`");
      if (l.a == l.b)
        return field_error(file, join_path(ipath, "between"), between->dump(),
                           "joins a subcluster to itself",
                           "describe links inside a subcluster with intra_node/inter_node");
      l.link = read_link(lr, "latency_ms");
      HARP_RETURN_IF_ERROR(lr.finish());
      for (const auto& prev : c.links)
        if ((prev.a == l.a && prev.b == l.b) || (prev.a == l.b && prev.b == l.a))
          return field_error(file, join_path(ipath, "between"), between->dump(),
                             "duplicates an earlier link", "keep one entry per pair");
      c.links.push_back(l);
    }
  }
  HARP_RETURN_IF_ERROR(r.finish());

  for (size_t i = 0; i + 1 < c.subclusters.size(); ++i) {
    if (!c.link_between(static_cast<int>(i), static_cast<int>(i + 1)))
      return field_error(file, r.path_of("links"), "",
                         "has no link between consecutive subclusters `" + c.subclusters[i].name +
                             "` and `" + c.subclusters[i + 1].name + "`",
                         "add `{between: [" + c.subclusters[i].name + ", " +
                             c.subclusters[i + 1].name + "], bandwidth_gbps: 5, latency_ms: 1}`");
  }
  return c;
}

StatusOr<Cluster> load_cluster(const std::string& file) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  return parse_cluster(doc, file);
}

namespace {
Json link_json(const Link& l, bool in_ms) {
  Json j;
  j["bandwidth_gbps"] = l.bandwidth_gbps;
  if (in_ms)
    j["latency_ms"] = l.latency_s * 1e3;
  else
    j["latency_us"] = l.latency_s * 1e6;
  return j;
}
}  // namespace

Json cluster_to_json(const Cluster& c) {
  Json j;
  j["version"] = 1;
  j["name"] = c.name;
  Json devs = Json::array();
  for (const auto& [name, d] : c.devices) {
    if (find_builtin_device(name)) continue;
    devs.push_back({{"name", d.name},
                    {"peak_tflops", d.peak_tflops},
                    {"memory_gib", d.memory_gib},
                    {"memory_bandwidth_gbs", d.memory_bandwidth_gbs},
                    {"emulated_slowdown", d.emulated_slowdown}});
    // Only when given, so that the fingerprints of earlier clusters stay as they were.
    if (d.compute_capability > 0) devs.back()["compute_capability"] = d.compute_capability;
    if (d.fp32_tflops > 0) devs.back()["fp32_tflops"] = d.fp32_tflops;
    if (!d.bfloat16) devs.back()["bfloat16"] = false;
  }
  if (!devs.empty()) j["devices"] = devs;
  Json subs = Json::array();
  for (const auto& s : c.subclusters) {
    Json sj = {{"name", s.name},
               {"device", s.device},
               {"nodes", s.nodes},
               {"devices_per_node", s.devices_per_node}};
    if (s.devices_per_node > 1) sj["intra_node"] = link_json(s.intra_node, false);
    if (s.nodes > 1) sj["inter_node"] = link_json(s.inter_node, false);
    subs.push_back(sj);
  }
  j["subclusters"] = subs;
  Json links = Json::array();
  for (const auto& l : c.links) {
    Json lj = link_json(l.link, true);
    lj["between"] = {l.a, l.b};
    links.push_back(lj);
  }
  j["links"] = links;
  return j;
}

}  // namespace harp::cluster
