#include "harp/plan/plan_io.h"

#include <map>

#include "harp/common/fields.h"
#include "harp/common/quantities.h"
#include "harp/model/model_spec.h"
#include "harp/plan/closed_form.h"

namespace harp::plan {
namespace {

// Work bounds (docs/file_formats.md, Limits): what simulating and printing a plan can do
// in seconds and a few GiB. The schedule's action count is bounded again when it is
// lowered (schedule/lower_plan.h).
constexpr std::int64_t kMaxPlanMicrobatches = 1 << 16, kMaxPlanMicrobatchSize = 1 << 16, kMaxPlanStages = 4096;

// An optional list field: between min_size and max_size elements, each a number in [lo,
// hi] (a whole one when `whole`); else the field's error with `rule` and `fix`.
template <typename T>
void read_list(FieldReader& r, const char* key, std::size_t min_size, std::int64_t max_size, double lo, double hi,
               bool whole, const char* rule, const char* fix, std::vector<T>* out) {
  const Json* list = r.get(key);
  if (list == nullptr) return;
  bool good = list->is_array() && list->size() >= min_size && static_cast<std::int64_t>(list->size()) <= max_size;
  if (good)
    for (const auto& x : *list)
      good = good && (whole ? x.is_number_integer() : x.is_number()) && x.get<double>() >= lo && x.get<double>() <= hi;
  if (!good)
    r.fail(key, list->dump(), rule, fix);
  else
    *out = list->get<std::vector<T>>();
}

Status parse_stage(const Json& node, const std::string& file, const std::string& path,
                   int microbatches, Stage* s) {
  FieldReader r(node, file, path);
  if (r.failed()) return r.finish();
  s->fwd_s = read_quantity(r, "fwd_s", quantity::kSeconds);
  s->bwd_s = read_quantity(r, "bwd_s", quantity::kSeconds);
  s->bwd_weight_s = read_quantity(r, "bwd_weight_s", quantity::kSeconds, 0.0);
  s->comm_s = read_quantity(r, "comm_s", quantity::kSeconds, 0.0);
  s->comm_latency_s = read_quantity(r, "comm_latency_s", quantity::kSeconds, 0.0);
  s->allreduce_s = read_quantity(r, "allreduce_s", quantity::kSeconds, 0.0);
  s->optimizer_s = read_quantity(r, "optimizer_s", quantity::kSeconds, 0.0);
  s->fixed_fwd_s = read_quantity(r, "fixed_fwd_s", quantity::kFixedSeconds, 0.0);
  s->fixed_bwd_s = read_quantity(r, "fixed_bwd_s", quantity::kFixedSeconds, 0.0);
  s->fixed_step_s = read_quantity(r, "fixed_step_s", quantity::kFixedSeconds, 0.0);
  s->dp = static_cast<int>(r.integer("dp", 1, 1, kMaxPlanMicrobatchSize));
  s->tp = static_cast<int>(r.integer("tp", 1, 1, 1024));
  s->launch_count = static_cast<int>(r.integer("launch_count", 1, 0));
  s->subcluster = static_cast<int>(r.integer("subcluster", 0, -1));
  s->subcluster_name = r.string("subcluster_name", "");
  s->device = r.string("device", "");
  s->cost_source = r.string("cost_source", "");
  parse_recompute(r.choice("recompute", {"none", "selective", "full"}, "none"), &s->recompute);
  s->zero = static_cast<int>(r.integer("zero", 0, 0, 2));
  read_list(r, "shares", 1, kMaxPlanMicrobatchSize, 1, kMaxPlanMicrobatchSize, true,
            "must be a list of positive sample counts, one per data-parallel replica",
            "write e.g. [3, 1] for two replicas taking 3 and 1 samples of each microbatch, or leave it out", &s->shares);
  read_list(r, "cut_shape", 0, 4, 1, 1 << 24, true, "must be a list of positive integers (per-sample tensor shape)",
            "write it as harp plan does, e.g. [1024, 2048], or leave it out", &s->cut_shape);
  s->memory_static_bytes = read_quantity(r, "memory_static_bytes", quantity::kBytes, 0.0);
  s->memory_working_bytes = read_quantity(r, "memory_working_bytes", quantity::kBytes, 0.0);
  s->activation_bytes = read_quantity(r, "activation_bytes", quantity::kBytes, 0.0);
  s->weight_grad_bytes = read_quantity(r, "weight_grad_bytes", quantity::kBytes, 0.0);
  s->memory_bytes = read_quantity(r, "memory_bytes", quantity::kBytes, 0.0);
  s->usable_memory_bytes = read_quantity(r, "usable_memory_bytes", quantity::kBytes, 0.0);
  s->comm_bytes = read_quantity(r, "comm_bytes", quantity::kBytes, 0.0);
  s->emulated_slowdown = read_quantity(r, "emulated_slowdown", quantity::kSlowdown, 1.0);
  read_list(r, "replica_slowdowns", 1, kMaxPlanMicrobatchSize, 1, 1000, false,
            "must be a list of factors in [1, 1000], one per data-parallel replica",
            "write e.g. [1, 2] for a replica as fast as the device and one twice slower, or leave it out",
            &s->replica_slowdowns);
  read_list(r, "replica_compute_s", 1, kMaxPlanMicrobatchSize, 0, 1e9, false,
            "must be a list of seconds >= 0, one per data-parallel replica",
            "write each replica's fwd + bwd per microbatch, or leave it out", &s->replica_compute_s);
  if (const Json* names = r.get("replica_devices")) {
    bool good = names->is_array() && !names->empty() && names->size() <= 4096;
    if (good)
      for (const auto& x : *names) good = good && x.is_string() && !x.get<std::string>().empty();
    if (!good)
      r.fail("replica_devices", names->dump(), "must be a list of device type names, one per data-parallel replica",
             "write e.g. [\"A100\", \"V100\"], or leave it out");
    else
      s->replica_devices = names->get<std::vector<std::string>>();
  }
  s->peak_tflops = read_quantity(r, "peak_tflops", quantity::kPeakTflops, 0.0);
  if (r.failed()) return r.finish();
  s->crosses_nodes = r.boolean("crosses_nodes", true);
  if (!r.failed() && s->fwd_s + s->bwd_s <= 0)
    r.fail("bwd_s", Json(s->bwd_s).dump(), "fwd_s + bwd_s must be greater than 0",
           "give the stage its measured or estimated compute time");
  if (!r.failed() && s->bwd_weight_s > s->bwd_s)
    r.fail("bwd_weight_s", Json(s->bwd_weight_s).dump(), "must not exceed bwd_s (" + Json(s->bwd_s).dump() + ")",
           "give the part of bwd_s that the weight gradients take, or leave it out");
  if (!r.failed() && s->comm_latency_s > s->comm_s)
    r.fail("comm_latency_s", Json(s->comm_latency_s).dump(),
           "must not exceed comm_s (" + Json(s->comm_s).dump() + ")",
           "comm_s is latency plus bytes / bandwidth; make comm_s the total");
  if (!r.failed() && s->launch_count > microbatches)
    r.fail("launch_count", std::to_string(s->launch_count),
           "must not exceed microbatches (" + std::to_string(microbatches) + ")",
           "lower it, or raise `microbatches`");
  if (const Json* layers = r.get("layers")) {
    auto in_range = [](const Json& v) {
      return v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= (1 << 20);
    };
    if (!layers->is_array() || layers->size() != 2 || !in_range((*layers)[0]) || !in_range((*layers)[1]) ||
        (*layers)[1].get<int>() <= (*layers)[0].get<int>())
      r.fail("layers", layers->dump(), "must be [first, last) with 0 <= first < last",
             "write the stage's layer range such as [0, 12]");
    else {
      s->first_layer = (*layers)[0].get<int>();
      s->last_layer = (*layers)[1].get<int>();
    }
  }
  if (const Json* devs = r.get("devices")) {
    bool good = devs->is_array();
    if (good)
      for (const auto& d : *devs)
        good = good && d.is_number_integer() && d.get<std::int64_t>() >= 0 && d.get<std::int64_t>() < (1 << 26);
    if (!good || (devs->size() != 0 && devs->size() != static_cast<size_t>(s->dp * s->tp)))
      r.fail("devices", devs->dump(),
             "must list dp x tp = " + std::to_string(s->dp * s->tp) + " device ids (>= 0)",
             "list one global device id per device of the stage");
    else
      for (const auto& d : *devs) s->devices.push_back(d.get<int>());
  }
  if (const Json* nodes = r.get("nodes")) {
    bool good = nodes->is_array() && nodes->size() == s->devices.size();
    if (good)
      for (const auto& n : *nodes)
        good = good && n.is_number_integer() && n.get<std::int64_t>() >= 0 && n.get<std::int64_t>() < (1 << 20);
    if (!good)
      r.fail("nodes", nodes->dump(),
             "must list the machine (node index >= 0) of each of the stage's " + std::to_string(s->devices.size()) +
                 " devices",
             "give one node index per entry of `devices`, or leave it out");
    else
      for (const auto& n : *nodes) s->nodes.push_back(n.get<int>());
  }
  return r.finish();
}

// What every command that takes a plan needs of it (simulate predicts what train runs):
// each replica holds a whole share of the microbatch, and each device runs one rank.
Status check_runnable(const Plan& p, const std::string& file) {
  std::map<int, int> owner;  // device -> first stage listing it
  for (int i = 0; i < p.num_stages(); ++i) {
    const Stage& s = p.stages[i];
    const std::string path = "stages[" + std::to_string(i) + "]";
    // Per-replica lists: one entry per data-parallel replica.
    for (const auto& [key, list] : {std::pair<const char*, Json>{"replica_devices", Json(s.replica_devices)},
                                    {"replica_compute_s", Json(s.replica_compute_s)},
                                    {"replica_slowdowns", Json(s.replica_slowdowns)}})
      if (!list.empty() && static_cast<int>(list.size()) != s.dp)
        return field_error(file, path + "." + key, list.dump(),
                           "lists " + std::to_string(list.size()) + " replicas, but the stage has dp " + std::to_string(s.dp),
                           "give one entry per data-parallel replica, or leave it out");
    if (!s.shares.empty()) {
      std::int64_t sum = 0;
      for (int n : s.shares) sum += n;
      if (static_cast<int>(s.shares.size()) != s.dp)
        return field_error(file, path + ".shares", Json(s.shares).dump(),
                           "lists " + std::to_string(s.shares.size()) + " replicas, but the stage has dp " +
                               std::to_string(s.dp),
                           "give one share per data-parallel replica");
      if (sum != p.microbatch_size)
        return field_error(file, path + ".shares", Json(s.shares).dump(),
                           "sums to " + std::to_string(sum) + " samples, not the microbatch_size " +
                               std::to_string(p.microbatch_size),
                           "make the replicas' shares add up to the microbatch");
    } else if (p.microbatch_size % s.dp != 0)
      return field_error(file, path + ".dp", std::to_string(s.dp),
                         "does not divide microbatch_size (" + std::to_string(p.microbatch_size) +
                             "): without `shares` each replica takes an equal whole share of a microbatch",
                         "use a dp that divides " + std::to_string(p.microbatch_size) +
                             ", a microbatch_size that dp divides, or give the replicas' `shares`");
    for (int d : s.devices) {
      const auto [it, fresh] = owner.emplace(d, i);
      if (!fresh)
        return field_error(file, path + ".devices", std::to_string(d),
                           it->second == i ? "appears twice in this stage"
                                           : "is also a device of stages[" + std::to_string(it->second) + "]",
                           "each device runs one rank of one stage: list every device once");
    }
  }
  return Status();
}

}  // namespace

StatusOr<Plan> parse_plan(const Json& node, const std::string& file) {
  FieldReader r(node, file, "");
  if (r.failed()) return r.finish();
  Plan p;
  p.version = static_cast<int>(r.integer("version", 1, 1));
  if (!r.failed() && p.version != 1)
    r.fail("version", std::to_string(p.version), "is not a supported plan version",
           "write `\"version\": 1`");
  p.microbatches = static_cast<int>(r.integer("microbatches", 1, std::nullopt, kMaxPlanMicrobatches));
  p.microbatch_size = static_cast<int>(r.integer("microbatch_size", 1, 1, kMaxPlanMicrobatchSize));
  std::string kind = r.choice("schedule", schedule_kind_names());
  parse_schedule_kind(kind, &p.schedule);
  p.cluster_fingerprint = r.string("cluster_fingerprint", "");
  p.model_fingerprint = r.string("model_fingerprint", "");
  p.model_name = r.string("model", "");
  r.get("predicted");  // recomputed on load; never trusted from the file
  p.cost_source = r.string("cost_source", "");
  p.granularity = static_cast<int>(r.integer("granularity", 0, 0));
  if (const Json* mc = r.get("model_config")) {
    if (!mc->is_object())
      r.fail("model_config", mc->dump(), "must be an object (the model spec)",
             "leave it as harp plan wrote it, or remove it and pass --model to harp train");
    else if (auto model = model::parse_model(*mc, file, "model_config"); !model.ok())
      // Read as harp train reads it, so that every command refuses what it would (an
      // unknown key, a bad value), not only the ones that build the model.
      r.fail(model.status());
    else
      p.model_config = *mc;
  }
  if (const Json* search = r.get("search")) {
    // Informational: read what is well-typed, ignore the rest.
    if (search->is_object()) {
      if (search->contains("strategy") && (*search)["strategy"].is_string()) p.strategy = (*search)["strategy"];
      if (search->contains("wall_s") && (*search)["wall_s"].is_number()) p.search_wall_s = (*search)["wall_s"];
    }
  }
  if (r.failed()) return r.finish();
  const Json* stages = r.get("stages");
  if (stages == nullptr || !stages->is_array() || stages->empty())
    return field_error(file, "stages", stages ? stages->dump() : "",
                       "must be a non-empty list of stages",
                       "add `\"stages\": [{\"fwd_s\": 0.01, \"bwd_s\": 0.02, \"comm_s\": 0.001}]`");
  if (static_cast<std::int64_t>(stages->size()) > kMaxPlanStages)
    return field_error(file, "stages", "a list of " + std::to_string(stages->size()),
                       "must have at most " + std::to_string(kMaxPlanStages) + " stages",
                       "use fewer, larger stages");
  for (size_t i = 0; i < stages->size(); ++i) {
    Stage s;
    HARP_RETURN_IF_ERROR(
        parse_stage((*stages)[i], file, "stages[" + std::to_string(i) + "]", p.microbatches, &s));
    p.stages.push_back(std::move(s));
  }
  HARP_RETURN_IF_ERROR(r.finish());

  const int S = p.num_stages();
  bool all_counts = true, any_count = false;
  for (int i = 0; i < S; ++i) {
    const Stage& s = p.stages[i];
    all_counts = all_counts && s.launch_count > 0;
    any_count = any_count || s.launch_count > 0;
    std::string path = "stages[" + std::to_string(i) + "]";
    if (i + 1 < S && s.last_layer >= 0 && p.stages[i + 1].first_layer >= 0 &&
        s.last_layer != p.stages[i + 1].first_layer)
      return field_error(file, path + ".layers",
                         "[" + std::to_string(s.first_layer) + ", " + std::to_string(s.last_layer) + "]",
                         "is not followed by the next stage's first layer (" +
                             std::to_string(p.stages[i + 1].first_layer) + ")",
                         "make stage ranges contiguous: each stage starts where the previous ends");
    if (i + 1 < S && s.launch_count > 0 && p.stages[i + 1].launch_count > s.launch_count)
      return field_error(file, "stages[" + std::to_string(i + 1) + "].launch_count",
                         std::to_string(p.stages[i + 1].launch_count),
                         "is larger than the previous stage's (" + std::to_string(s.launch_count) +
                             "); launch counts must not increase along the pipeline",
                         "lower it or raise the earlier stages' launch counts");
  }
  if (any_count && !all_counts)
    return field_error(file, "stages", "", "give launch_count on every stage or on none",
                       "add launch_count to the stages that lack it, or remove them all");
  HARP_RETURN_IF_ERROR(check_runnable(p, file));
  p.predicted = closed_form(p);
  return p;
}

StatusOr<Plan> load_plan(const std::string& file) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  return parse_plan(doc, file);
}

Json plan_to_json(const Plan& p) {
  Json j;
  j["version"] = p.version;
  if (!p.model_name.empty()) j["model"] = p.model_name;
  if (!p.cluster_fingerprint.empty()) j["cluster_fingerprint"] = p.cluster_fingerprint;
  if (!p.model_fingerprint.empty()) j["model_fingerprint"] = p.model_fingerprint;
  j["microbatches"] = p.microbatches;
  j["microbatch_size"] = p.microbatch_size;
  j["schedule"] = schedule_kind_name(p.schedule);
  Json stages = Json::array();
  for (const auto& s : p.stages) {
    Json sj;
    if (s.first_layer >= 0) sj["layers"] = {s.first_layer, s.last_layer};
    if (s.subcluster >= 0) sj["subcluster"] = s.subcluster;
    if (!s.subcluster_name.empty()) sj["subcluster_name"] = s.subcluster_name;
    if (!s.devices.empty()) sj["devices"] = s.devices;
    if (!s.nodes.empty()) sj["nodes"] = s.nodes;
    sj["dp"] = s.dp;
    sj["tp"] = s.tp;
    if (!s.shares.empty()) sj["shares"] = s.shares;
    if (s.recompute != Recompute::kNone) sj["recompute"] = recompute_name(s.recompute);
    if (s.zero != 0) sj["zero"] = s.zero;
    if (s.launch_count > 0) sj["launch_count"] = s.launch_count;
    sj["fwd_s"] = s.fwd_s;
    sj["bwd_s"] = s.bwd_s;
    if (s.bwd_weight_s > 0) sj["bwd_weight_s"] = s.bwd_weight_s;
    sj["comm_s"] = s.comm_s;
    sj["comm_latency_s"] = s.comm_latency_s;
    sj["crosses_nodes"] = s.crosses_nodes;
    sj["allreduce_s"] = s.allreduce_s;
    sj["optimizer_s"] = s.optimizer_s;
    if (s.fixed_fwd_s != 0 || s.fixed_bwd_s != 0 || s.fixed_step_s != 0) {
      sj["fixed_fwd_s"] = s.fixed_fwd_s;
      sj["fixed_bwd_s"] = s.fixed_bwd_s;
      sj["fixed_step_s"] = s.fixed_step_s;
    }
    sj["comm_bytes"] = s.comm_bytes;
    sj["memory_static_bytes"] = s.memory_static_bytes;
    if (s.memory_working_bytes > 0) sj["memory_working_bytes"] = s.memory_working_bytes;
    sj["activation_bytes"] = s.activation_bytes;
    if (s.weight_grad_bytes > 0) sj["weight_grad_bytes"] = s.weight_grad_bytes;
    sj["memory_bytes"] = s.memory_bytes;
    if (s.usable_memory_bytes > 0) sj["usable_memory_bytes"] = s.usable_memory_bytes;
    if (s.emulated_slowdown != 1.0) sj["emulated_slowdown"] = s.emulated_slowdown;
    if (!s.replica_slowdowns.empty()) sj["replica_slowdowns"] = s.replica_slowdowns;
    if (!s.replica_devices.empty()) sj["replica_devices"] = s.replica_devices;
    if (!s.replica_compute_s.empty()) sj["replica_compute_s"] = s.replica_compute_s;
    if (!s.device.empty()) sj["device"] = s.device;
    if (s.peak_tflops > 0) sj["peak_tflops"] = s.peak_tflops;
    if (!s.cost_source.empty()) sj["cost_source"] = s.cost_source;
    if (!s.cut_shape.empty()) sj["cut_shape"] = s.cut_shape;
    stages.push_back(sj);
  }
  j["stages"] = stages;
  const Prediction& pr = p.predicted;
  j["predicted"] = {{"iteration_s", pr.iteration_s},   {"period_s", pr.period_s},
                    {"round_trip_s", pr.round_trip_s}, {"steady_s", pr.steady_s},
                    {"end_s", pr.end_s},
                    {"bubble_fraction", pr.bubble_fraction}};
  if (!p.strategy.empty()) j["search"] = {{"strategy", p.strategy}, {"wall_s", p.search_wall_s}};
  if (!p.cost_source.empty()) j["cost_source"] = p.cost_source;
  if (p.granularity > 0) j["granularity"] = p.granularity;
  if (!p.model_config.is_null()) j["model_config"] = p.model_config;
  return j;
}

Status save_plan(const Plan& plan, const std::string& file) {
  return write_text_file_atomic(file, plan_to_json(plan).dump(2) + "\n");
}

}  // namespace harp::plan
