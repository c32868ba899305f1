// Cost table parsing and validation; messages name the file, the field path and the fix.
#include "harp/cost/cost_table.h"

#include <algorithm>

#include "harp/common/fields.h"
#include "harp/common/quantities.h"

namespace harp::cost {
namespace {

Status read_times(const Json& node, const std::string& file, const std::string& path, size_t L,
                  std::vector<Seconds>* out) {
  if (!node.is_array() || node.size() != L)
    return field_error(file, path, node.is_array() ? "a list of " + std::to_string(node.size()) : node.dump(),
                       "must be a list of one time per layer (" + std::to_string(L) + ")",
                       "give one number in seconds for each entry of `layers`");
  for (size_t i = 0; i < L; ++i) {
    if (!node[i].is_number() || !in_range(quantity::kSeconds, node[i].get<double>()))
      return field_error(file, path + "[" + std::to_string(i) + "]", node[i].dump(),
                         "must be a number of seconds, " + range_text(quantity::kSeconds),
                         "write the layer's measured time");
    out->push_back(node[i].get<double>());
  }
  return Status();
}

// A key that is a whole positive number ("4"), or 0.
int parse_count(const std::string& key) {
  if (key.empty() || key.size() > 9) return 0;
  for (char c : key)
    if (c < '0' || c > '9') return 0;
  return std::stoi(key);
}

// One {fwd_s, bwd_s} entry (and, where present, its `tp` member, returned in *by_tp).
Status read_entry(const Json& entry, const std::string& file, const std::string& path, size_t L, Times* out,
                  const Json** by_tp) {
  FieldReader er(entry, file, path);
  const Json* fwd = er.get("fwd_s");
  const Json* bwd = er.get("bwd_s");
  *by_tp = er.get("tp");
  HARP_RETURN_IF_ERROR(er.finish());
  if (fwd == nullptr || bwd == nullptr)
    return field_error(file, path + (fwd ? ".bwd_s" : ".fwd_s"), "", "is required",
                       "give fwd_s and bwd_s lists with one time per layer");
  HARP_RETURN_IF_ERROR(read_times(*fwd, file, path + ".fwd_s", L, &out->fwd_s));
  return read_times(*bwd, file, path + ".bwd_s", L, &out->bwd_s);
}

}  // namespace

TableCosts::TableCosts(std::vector<LayerBytes> layers, DeviceTimes times, std::string file)
    : layers_(std::move(layers)), times_(std::move(times)), file_(std::move(file)) {}

std::optional<LayerTime> TableCosts::time(const cluster::Cluster& cluster, int sub, int layer,
                                          int samples, int tp) const {
  auto dev = times_.find(real_device(cluster.subclusters.at(sub).device));
  if (dev == times_.end()) return std::nullopt;
  auto entry = dev->second.find(samples);
  if (entry == dev->second.end()) return std::nullopt;
  const Times* times = &entry->second;
  if (tp != 1) {
    auto found = entry->second.tp.find(tp);
    if (found == entry->second.tp.end()) return std::nullopt;
    times = &found->second;
  }
  LayerTime t;
  t.fwd_s = times->fwd_s.at(layer);
  t.bwd_s = times->bwd_s.at(layer);
  t.source = CostSource::kTable;
  return t;
}

int TableCosts::max_tp() const {
  int most = 1;
  for (const auto& [device, sizes] : times_)
    for (const auto& [samples, entry] : sizes)
      if (!entry.tp.empty()) most = std::max(most, entry.tp.rbegin()->first);
  return most;
}

StatusOr<CostTable> parse_cost_table(const Json& node, const std::string& file) {
  FieldReader r(node, file, "");
  if (r.failed()) return r.finish();
  CostTable t;
  std::int64_t version = r.integer("version", 1);
  if (!r.failed() && version != 1)
    r.fail("version", std::to_string(version), "is not a supported version", "write `\"version\": 1`");
  t.microbatch_size = static_cast<int>(r.integer("microbatch_size", 1));
  const Json* layers = r.get("layers");
  const Json* devices = r.get("devices");
  HARP_RETURN_IF_ERROR(r.finish());
  // What the largest model file can describe (1,024 blocks at granularity 4, embedding
  // and head): planning takes seconds there (docs/file_formats.md, Limits).
  constexpr size_t kMaxLayers = 4098;
  if (layers != nullptr && layers->is_array() && layers->size() > kMaxLayers)
    return field_error(file, "layers", "a list of " + std::to_string(layers->size()),
                       "has more than " + std::to_string(kMaxLayers) + " layers, past what the planner is sized for",
                       "merge layers (a coarser granularity)");
  if (layers == nullptr || !layers->is_array() || layers->empty())
    return field_error(file, "layers", layers ? layers->dump() : "", "must be a non-empty list",
                       "add one {name, param_bytes, output_bytes, activation_bytes} per layer");
  for (size_t i = 0; i < layers->size(); ++i) {
    FieldReader lr((*layers)[i], file, "layers[" + std::to_string(i) + "]");
    t.layer_names.push_back(lr.string("name", "layer" + std::to_string(i)));
    LayerBytes b;
    b.param_bytes = read_quantity(lr, "param_bytes", quantity::kBytes);
    b.output_bytes = read_quantity(lr, "output_bytes", quantity::kBytes);
    b.activation_bytes = read_quantity(lr, "activation_bytes", quantity::kBytes);
    // Optional, for recomputation (layer_costs.h); absent: the layer is not recomputed.
    b.block = static_cast<int>(lr.integer("block", -1, -1));
    b.input_bytes = read_quantity(lr, "input_bytes", quantity::kBytes, 0.0);
    b.attention_score_bytes = read_quantity(lr, "attention_score_bytes", quantity::kBytes, 0.0);
    b.attention_flop_fraction = lr.non_negative("attention_flop_fraction", 0.0);
    // Optional, for split backwards (layer_costs.h); absent: the W pass is taken as empty.
    b.weight_grad_fraction = lr.non_negative("weight_grad_fraction", 0.0);
    b.weight_grad_bytes = read_quantity(lr, "weight_grad_bytes", quantity::kBytes, 0.0);
    HARP_RETURN_IF_ERROR(lr.finish());
    if (b.attention_score_bytes > b.activation_bytes)
      return field_error(file, "layers[" + std::to_string(i) + "].attention_score_bytes",
                         std::to_string(b.attention_score_bytes), "must not exceed the layer's activation_bytes",
                         "give the part of activation_bytes that the attention scores take");
    if (b.attention_flop_fraction > 1)
      return field_error(file, "layers[" + std::to_string(i) + "].attention_flop_fraction",
                         std::to_string(b.attention_flop_fraction), "must be at most 1",
                         "give the attention core's share of the layer's forward time");
    t.layers.push_back(b);
  }
  if (devices == nullptr || !devices->is_object() || devices->empty())
    return field_error(file, "devices", devices ? devices->dump() : "",
                       "must map device types to per-microbatch-size times",
                       "add {\"A100-40GB\": {\"4\": {\"fwd_s\": [...], \"bwd_s\": [...]}}}");
  for (const auto& [dev, sizes] : devices->items()) {
    const std::string dpath = "devices." + dev;
    if (!sizes.is_object() || sizes.empty())
      return field_error(file, dpath, sizes.dump(), "must map microbatch sizes to times",
                         "add {\"" + std::to_string(t.microbatch_size) + "\": {\"fwd_s\": [...], \"bwd_s\": [...]}}");
    for (const auto& [key, entry] : sizes.items()) {
      const std::string kpath = dpath + "." + key;
      const int samples = parse_count(key);
      if (samples < 1 || t.microbatch_size % samples != 0)
        return field_error(file, kpath, "", "is not a microbatch size dividing " + std::to_string(t.microbatch_size),
                           "use keys such as \"" + std::to_string(t.microbatch_size) + "\", \"" +
                               std::to_string(std::max(1, t.microbatch_size / 2)) + "\"");
      LayerTimes lt;
      const Json* by_tp = nullptr;
      HARP_RETURN_IF_ERROR(read_entry(entry, file, kpath, t.layers.size(), &lt, &by_tp));
      if (by_tp != nullptr) {
        if (!by_tp->is_object())
          return field_error(file, kpath + ".tp", by_tp->dump().substr(0, 40), "must map tp degrees to times",
                             "write {\"2\": {\"fwd_s\": [...], \"bwd_s\": [...]}}");
        for (const auto& [degree, times] : by_tp->items()) {
          const std::string tpath = kpath + ".tp." + degree;
          const int tp = parse_count(degree);
          if (tp < 2 || (tp & (tp - 1)) != 0)
            return field_error(file, tpath, "", "is not a tp degree: a power of two, at least 2",
                               "use keys such as \"2\", \"4\" (tp 1 is the entry itself)");
          const Json* nested = nullptr;
          HARP_RETURN_IF_ERROR(read_entry(times, file, tpath, t.layers.size(), &lt.tp[tp], &nested));
          if (nested != nullptr)
            return field_error(file, tpath + ".tp", "", "is not allowed here", "list tp degrees once, beside fwd_s");
        }
      }
      t.times[dev][samples] = std::move(lt);
    }
  }
  return t;
}

StatusOr<CostTable> load_cost_table(const std::string& file) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  return parse_cost_table(doc, file);
}

Status check_cost_table(const CostTable& table, const cluster::Cluster& cluster,
                        const std::string& file) {
  for (const auto& [dev, sizes] : table.times)
    if (!cluster.devices.count(dev))
      return field_error(file, "devices." + dev, "", "is not a device type of the cluster",
                         "use the device names of the cluster's subclusters");
  for (const auto& s : cluster.subclusters) {
    auto it = table.times.find(s.device);
    if (it == table.times.end() || !it->second.count(table.microbatch_size))
      return field_error(file, "devices." + s.device + "." + std::to_string(table.microbatch_size), "",
                         "is missing: subcluster `" + s.name + "` runs on " + s.device +
                             " and the search needs its times for the whole microbatch",
                         "add fwd_s and bwd_s lists for " + s.device + " at microbatch size " +
                             std::to_string(table.microbatch_size));
  }
  return Status();
}

}  // namespace harp::cost
