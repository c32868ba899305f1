// Job files: resolves section paths, validates every section with the same messages
// as the standalone files, and keeps the resolved copy.
#include "harp/job/job.h"

#include "harp/cluster/cluster_io.h"
#include "harp/common/fields.h"
#include "harp/common/format.h"

namespace harp::job {
namespace {

// A section is either inline or a path to its own file.
StatusOr<std::pair<Json, std::string>> section(const Json& node, const std::string& job_file,
                                               const std::string& key) {
  if (node.is_string()) {
    if (node.get_ref<const std::string&>().empty())
      return field_error(job_file, key, "''", "must name a file, or hold the section inline",
                         "write `" + key + ": path/to/" + key + ".yaml`");
    // Read as every text field is (FieldReader::string): a NUL byte is refused naming the
    // job's field, not the file name it would cut short.
    const Json field = Json::object({{key, node}});  // FieldReader keeps a reference
    FieldReader text(field, job_file, "");
    const std::string name = text.string(key);
    HARP_RETURN_IF_ERROR(text.finish());
    std::string path = resolve_relative_to(job_file, name);
    HARP_ASSIGN_OR_RETURN(Json doc, load_document(path));
    return std::make_pair(doc, path);
  }
  HARP_RETURN_IF_ERROR(require_object(node, job_file, key));
  return std::make_pair(node, job_file);
}

}  // namespace

StatusOr<Job> parse_job(const Json& node, const std::string& file) {
  FieldReader r(node, file, "");
  if (r.failed()) return r.finish();
  Job job;
  job.file = file;
  std::int64_t version = r.integer("version", 1, 1);
  if (!r.failed() && version != 1)
    r.fail("version", std::to_string(version), "is not a supported job version", "write `version: 1`");
  const Json* cluster_node = r.get("cluster");
  const Json* model_node = r.get("model");
  const Json* planner_node = r.get("planner");
  const Json* schedule_node = r.get("schedule");
  const Json* cost_node = r.get("cost");
  const Json* training_node = r.get("training");
  HARP_RETURN_IF_ERROR(r.finish());
  if (cluster_node == nullptr)
    return field_error(file, "cluster", "", "is required",
                       "add `cluster: path/to/cluster.yaml` or an inline cluster");
  if (model_node == nullptr)
    return field_error(file, "model", "", "is required",
                       "add `model: {family: gpt, preset: gpt-1.3b, granularity: 2}`");

  HARP_ASSIGN_OR_RETURN(auto cl, section(*cluster_node, file, "cluster"));
  HARP_ASSIGN_OR_RETURN(job.cluster,
                        cluster::parse_cluster(cl.first, cl.second, cl.second == file ? "cluster" : ""));
  HARP_ASSIGN_OR_RETURN(auto md, section(*model_node, file, "model"));
  HARP_ASSIGN_OR_RETURN(job.model,
                        model::parse_model(md.first, md.second, md.second == file ? "model" : ""));

  if (planner_node != nullptr) {
    // `zero: 1` is a level, not a name: read as the name it spells.
    Json planner = *planner_node;
    if (planner.is_object() && planner.contains("zero") && planner["zero"].is_number_integer())
      planner["zero"] = std::to_string(planner["zero"].get<long long>());
    FieldReader pr(planner, file, "planner");
    plan::parse_strategy(pr.choice("strategy", {"harp", "uniform", "homogeneous"},
                                   std::string(plan::strategy_name(job.planner.strategy))),
                         &job.planner.strategy);
    // Bounded so that the global batch (their product) and every sweep stay small.
    job.planner.microbatches = static_cast<int>(pr.integer("microbatches", 1, job.planner.microbatches, 1 << 16));
    job.planner.microbatch_size =
        static_cast<int>(pr.integer("microbatch_size", 1, job.planner.microbatch_size, 1 << 16));
    job.planner.recompute = pr.choice("recompute", {"none", "selective", "full", "auto"}, job.planner.recompute);
    job.planner.zero = pr.choice("zero", {"0", "1", "2", "auto"}, job.planner.zero);
    job.planner.max_tp = static_cast<int>(pr.integer("max_tp", 0, job.planner.max_tp, 1 << 16));
    job.planner.allow_idle_devices = pr.boolean("allow_idle_devices", job.planner.allow_idle_devices);
    job.planner.fixed_order = pr.boolean("fixed_order", job.planner.fixed_order);
    job.planner.mixed_stages = pr.boolean("mixed_stages", job.planner.mixed_stages);
    job.planner.schedule_in_search =
        pr.choice("search_schedule", {"harp-1f1b", "1f1b"}, job.planner.schedule_in_search ? "harp-1f1b" : "1f1b") ==
        "harp-1f1b";
    if (!pr.failed() && static_cast<std::int64_t>(job.planner.microbatches) * job.planner.microbatch_size > (1 << 24))
      pr.fail("microbatch_size", std::to_string(job.planner.microbatch_size),
              "makes a global batch of " +
                  std::to_string(static_cast<std::int64_t>(job.planner.microbatches) * job.planner.microbatch_size) +
                  " samples, over the limit of 16777216",
              "use a smaller microbatch_size or fewer microbatches");
    HARP_RETURN_IF_ERROR(pr.finish());
  }
  if (schedule_node != nullptr) {
    FieldReader sr(*schedule_node, file, "schedule");
    std::vector<std::string> kinds = plan::schedule_kind_names();
    kinds.push_back("auto");
    const bool given = schedule_node->is_object() && schedule_node->contains("kind");
    const std::string kind = sr.choice("kind", kinds, "auto");
    HARP_RETURN_IF_ERROR(sr.finish());
    if (given) job.schedule = kind;
  }
  if (cost_node != nullptr) {
    HARP_ASSIGN_OR_RETURN(job.cost, cost::parse_cost_config(*cost_node, file, "cost"));
  }
  if (training_node != nullptr) {
    HARP_RETURN_IF_ERROR(require_object(*training_node, file, "training"));
    HARP_ASSIGN_OR_RETURN(job.training, config::parse_train_config(*training_node, file, "training"));
    // The planner's bytes follow the run the job trains: the model's figures are fp16;
    // float32 (the default) doubles activations and cut tensors, float64 quadruples them,
    // bf16 and fp16 keep them. A cost section that sets activation_bytes_scale wins.
    const config::Dtype d = job.training.dtype;
    // bfloat16 on a GPU without it (V100, T4) is refused, not quietly run as something
    // else: the choice of float16 and its loss scaling is the user's to make. Runs on the
    // CPU (device: cpu) use the cluster's names for emulation only.
    const bool bf16 =
        d == config::Dtype::kBFloat16 || job.training.grad_reduce_dtype == config::GradReduceDtype::kBFloat16;
    if (bf16 && job.training.device != config::Device::kCpu)
      for (const cluster::Subcluster& s : job.cluster.subclusters) {
        const cluster::DeviceType& dev = job.cluster.devices.at(s.device);
        if (dev.bfloat16) continue;
        const bool in_dtype = d == config::Dtype::kBFloat16;
        return field_error(file, in_dtype ? "training.dtype" : "training.grad_reduce_dtype", "\"bfloat16\"",
                           dev.name + " (subcluster " + s.name + ", compute capability " +
                               fmt("%.1f", dev.compute_capability) + ") has no bfloat16 arithmetic",
                           in_dtype ? "train in `dtype: float16` (dynamic loss scaling, Megatron's --fp16) on a "
                                      "cluster with " +
                                          dev.name + ", or leave subcluster " + s.name + " out"
                                    : "reduce in float16 or float32 on a cluster with " + dev.name);
      }
    const double scale = d == config::Dtype::kFloat64 ? 4.0 : d == config::Dtype::kFloat32 ? 2.0 : 1.0;
    auto given = [&](const char* key) { return cost_node != nullptr && cost_node->contains(key); };
    if (!given("activation_bytes_scale")) job.cost.activation_bytes_scale = scale;
    // The roofline prices the dtype the run computes in (cost/efficiency.h).
    if (!given("compute_dtype")) job.cost.compute_dtype = config::name_of(d);
    // The runtime's parameters are float32 (float64) master weights beside gradients of
    // their dtype and Adam's m and v: 16 bytes a parameter (32 in float64), of which the
    // moments are what ZeRO shards.
    const double state = d == config::Dtype::kFloat64 ? 16.0 : 8.0;
    if (!given("state_bytes_per_param_byte")) job.cost.state_bytes_per_param_byte = state;
    if (!given("optimizer_bytes_per_param_byte"))
      job.cost.optimizer_bytes_per_param_byte = job.cost.state_bytes_per_param_byte / 2;
    // ZeRO's all-gather moves those master weights.
    if (!given("parameter_bytes_per_param_byte")) job.cost.parameter_bytes_per_param_byte = state / 4;
    // The gradients on the wire have one source, what the runtime sends: the all-reduce
    // dtype when training.grad_reduce_dtype names one, else the gradients' own, which
    // are float32 in a bf16 or fp16 run (float32 master weights; Megatron-LM too reduces
    // in float32 by default) and float64 in a float64 run.
    const std::optional<config::Dtype> reduced = config::reduce_dtype(job.training.grad_reduce_dtype);
    const config::Dtype wire = reduced ? *reduced : d == config::Dtype::kFloat64 ? d : config::Dtype::kFloat32;
    const double gradient = wire == config::Dtype::kFloat64 ? 4.0 : wire == config::Dtype::kFloat32 ? 2.0 : 1.0;
    if (given("gradient_bytes_per_param_byte") && job.cost.gradient_bytes_per_param_byte != gradient)
      return field_error(file, "cost.gradient_bytes_per_param_byte",
                         Json(job.cost.gradient_bytes_per_param_byte).dump(),
                         "contradicts the training section, whose run all-reduces " + config::name_of(wire) +
                             " gradients (" + Json(gradient).dump() + " bytes per fp16 parameter byte; training.dtype " +
                             config::name_of(d) + ", grad_reduce_dtype " + config::name_of(job.training.grad_reduce_dtype) +
                             ")",
                         "remove the key (a job that trains derives it), or set training.grad_reduce_dtype");
    job.cost.gradient_bytes_per_param_byte = gradient;
  }

  job.resolved = {{"version", 1},
                  {"cluster", cluster::cluster_to_json(job.cluster)},
                  {"model", model::model_to_json(job.model)},
                  {"planner",
                   {{"strategy", plan::strategy_name(job.planner.strategy)},
                    {"microbatches", job.planner.microbatches},
                    {"microbatch_size", job.planner.microbatch_size},
                    {"recompute", job.planner.recompute},
                    {"zero", job.planner.zero},
                    {"max_tp", job.planner.max_tp},
                    {"allow_idle_devices", job.planner.allow_idle_devices},
                    {"fixed_order", job.planner.fixed_order},
                    {"mixed_stages", job.planner.mixed_stages},
                    {"search_schedule", job.planner.schedule_in_search ? "harp-1f1b" : "1f1b"}}},
                  {"schedule", job.schedule.empty() ? Json::object() : Json{{"kind", job.schedule}}},
                  {"cost", cost::cost_config_to_json(job.cost)},
                  {"training", config::train_config_to_json(job.training)}};
  return job;
}

StatusOr<Job> load_job(const std::string& file) {
  HARP_ASSIGN_OR_RETURN(Json doc, load_document(file));
  return parse_job(doc, file);
}

}  // namespace harp::job
