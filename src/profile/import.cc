// Reading Metis-format profiles (see import.h).
#include "harp/profile/import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>

#include "harp/common/fields.h"

namespace harp::profile {
namespace {

namespace fs = std::filesystem;

struct SourceFile {
  std::string path, gpu;
  int microbatch_size = 1, tp = 1;
};

// At most this many files per import: the published sets have a few dozen.
constexpr size_t kMaxFiles = 10000;

StatusOr<std::vector<SourceFile>> list_files(const ImportRequest& r) {
  std::error_code ec;
  if (!fs::is_directory(r.dir, ec))
    return not_found(shown_path(r.dir) + ": not a folder; give the folder of the " + r.format +
                     " profiles (e.g. examples/profiles/sailor/OPT-350)");
  std::vector<SourceFile> out;
  const std::regex sailor_name(R"(mbs([1-9][0-9]{0,5})_tmp([1-9][0-9]{0,3})\.json)");
  const std::regex metis_name(R"(DeviceType\.(.+)_tp([1-9][0-9]{0,3})_bs([1-9][0-9]{0,5})\.json)");
  auto add_dir = [&](const fs::path& dir, const std::string& gpu) -> Status {
    std::vector<fs::path> names;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (names.size() >= kMaxFiles) return invalid_argument(shown_path(dir.string()) + ": more than 10000 files");
      names.push_back(it->path());
    }
    if (ec) return io_error(shown_path(dir.string()) + ": " + ec.message());
    std::sort(names.begin(), names.end());
    for (const fs::path& p : names) {
      const std::string name = p.filename().string();
      std::smatch m;
      if (r.format == "sailor" && std::regex_match(name, m, sailor_name))
        out.push_back({p.string(), gpu, std::stoi(m[1]), std::stoi(m[2])});
      else if (r.format == "metis" && std::regex_match(name, m, metis_name))
        out.push_back({p.string(), m[1], std::stoi(m[3]), std::stoi(m[2])});
    }
    return Status();
  };
  if (r.format == "sailor") {
    std::vector<fs::path> gpus;
    for (fs::directory_iterator it(r.dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec) && gpus.size() < kMaxFiles) gpus.push_back(it->path());
    std::sort(gpus.begin(), gpus.end());
    for (const fs::path& g : gpus) HARP_RETURN_IF_ERROR(add_dir(g, g.filename().string()));
  } else {
    HARP_RETURN_IF_ERROR(add_dir(r.dir, ""));
  }
  if (out.empty())
    return not_found(shown_path(r.dir) + ": no " + r.format + " profile files in it (" +
                     (r.format == "sailor" ? "GPU/mbs<B>_tmp<T>.json" : "DeviceType.<GPU>_tp<T>_bs<B>.json") +
                     "); check --format and the folder");
  return out;
}

// The number list at `key` of `r`, exactly `n` finite non-negative values.
// One number per layer. With split_tail, n + 1 are taken too: Sailor's LLaMA files list
// the final norm and the LM head as two modules where the compute times have one
// layer; their sum is our tail.
std::vector<double> numbers(FieldReader& r, const std::string& key, size_t n, bool split_tail = false) {
  const Json* v = r.get(key);
  std::vector<double> out;
  if (r.failed()) return out;
  const bool split = split_tail && v != nullptr && v->is_array() && v->size() == n + 1;
  if (v == nullptr || !v->is_array() || (v->size() != n && !split)) {
    r.fail(key, v == nullptr ? "(missing)" : v->dump().substr(0, 80),
           "must be a list of " + std::to_string(n) + " numbers (one per layer)",
           "use a profile of this model");
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& x = (*v)[i];
    if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>())) {
      r.fail(key + "[" + std::to_string(i) + "]", x.dump(), "must be a finite number >= 0", "fix the profile");
      return {};
    }
    out.push_back(x.get<double>());
  }
  if (split) {
    out[n - 1] += out[n];
    out.pop_back();
  }
  return out;
}

double lower_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

}  // namespace

std::string import_device_name(const std::string& gpu) {
  static const std::map<std::string, std::string> known = {
      {"A100-40", "A100-40GB"}, {"A100-80", "A100-80GB"}, {"V100-16", "V100-16GB"}, {"V100-32", "V100-32GB"},
      {"GH-96", "GH200"},       {"RTX-3090", "RTX3090"},  {"RTX-4090", "RTX4090"},  {"H100-80", "H100-80GB"}};
  auto it = known.find(gpu);
  return it == known.end() ? gpu : it->second;
}

StatusOr<ProfileDb> import_profiles(const ImportRequest& request, const model::ModelSpec& model) {
  if (request.format != "sailor" && request.format != "metis")
    return invalid_argument("format `" + request.format + "` is not known; use sailor or metis");
  HARP_ASSIGN_OR_RETURN(std::vector<SourceFile> files, list_files(request));
  const size_t L = model.layers.size();
  std::map<std::string, std::vector<int>> groups;  // signature -> layers
  for (size_t i = 0; i < L; ++i) groups[model.layers[i].signature].push_back(static_cast<int>(i));
  ProfileDb db;
  for (const SourceFile& f : files) {
    if (!request.gpu_names.empty() && !request.gpu_names.count(f.gpu)) continue;
    HARP_ASSIGN_OR_RETURN(Json doc, load_document(f.path));
    FieldReader top(doc, f.path, "");
    const Json* m = top.get("model");
    const Json* et = top.get("execution_time");
    const Json* em = top.get("execution_memory");
    if (!top.failed() && (m == nullptr || et == nullptr))
      top.fail("model", "(missing)", "a Metis profile has `model` and `execution_time`", "use a Metis-format file");
    if (top.failed()) return top.finish();
    FieldReader mr(*m, f.path, "model");
    const std::int64_t layers = mr.integer("num_layers", 1, std::nullopt, 1 << 20);
    if (!mr.failed() && static_cast<size_t>(layers) != L)
      mr.fail("num_layers", std::to_string(layers),
              "must equal the model's layer count at granularity 1 (" + std::to_string(L) + ": embedding, " +
                  std::to_string(model.gpt.num_blocks) + " blocks, head)",
              "use the profile of this model, or describe the profiled model (its blocks) in the job");
    const Json* params = mr.get("parameters");
    if (mr.failed()) return mr.finish();
    if (params == nullptr) return field_error(f.path, "model.parameters", "(missing)", "is required", "use a Metis-format file");
    FieldReader pr(*params, f.path, "model.parameters");
    std::vector<double> param_bytes = numbers(pr, "parameters_per_layer_bytes", L, true);
    std::vector<double> act_bytes = numbers(pr, "activation_parameters_bytes", L, true);
    const double total_param_bytes = pr.non_negative("total_parameters_bytes", 0.0);
    if (pr.failed()) return pr.finish();
    FieldReader tr(*et, f.path, "execution_time");
    std::vector<double> ms = numbers(tr, "layer_compute_total_ms", L);
    const double optimizer_ms = tr.non_negative("optimizer_time_ms", -1.0);
    if (tr.failed()) return tr.finish();
    std::vector<double> mem_mb;
    if (em != nullptr) {
      FieldReader mm(*em, f.path, "execution_memory");
      mem_mb = numbers(mm, "layer_memory_total_mb", L, true);
      if (mm.failed()) return mm.finish();
    }
    auto name = request.gpu_names.find(f.gpu);
    const std::string device = name != request.gpu_names.end() ? name->second : import_device_name(f.gpu);
    for (const auto& [sig, members] : groups) {
      std::vector<double> t;
      for (int i : members) t.push_back(ms[i]);
      const double total_s = lower_median(t) * 1e-3;
      const int rep = members.front();
      ProfileEntry e;
      e.key = {device, sig, f.microbatch_size, f.tp};
      e.layer = model.layers[rep].name;
      e.fwd_s = total_s / 3;
      e.bwd_s = 2 * total_s / 3;
      e.param_bytes = param_bytes[rep] / 2;
      e.activation_bytes = act_bytes[rep];
      e.output_bytes = model.layers[rep].output_bytes * f.microbatch_size;
      e.peak_bytes = mem_mb.empty() ? 0 : mem_mb[rep] * 1024 * 1024;
      e.repeats = static_cast<int>(members.size());
      e.source = "imported";
      db.put(e);
    }
    if ((f.tp == 1 && f.microbatch_size == 1) || db.device(device) == nullptr) {
      DeviceProfile d;
      d.device = device;
      d.machine = request.format + " import of " + f.gpu + " (" + shown_path(request.dir) + ")";
      d.model = model.gpt.name;
      d.source = "imported";
      if (optimizer_ms >= 0 && total_param_bytes > 0)
        d.optimizer_s_per_param_byte = optimizer_ms * 1e-3 / (total_param_bytes / 2);
      db.put_device(d);
    }
  }
  if (db.size() == 0)
    return not_found(shown_path(request.dir) + ": none of the GPUs named by --gpu has a profile file there");
  return db;
}

// A cost table (docs/file_formats.md) for one microbatch size from the imported entries:
// what bench/plan_process.py and `harp plan --costs` read.
StatusOr<Json> cost_table_json(const profile::ProfileDb& db, const model::ModelSpec& model, int mbs) {
  Json layers = Json::array();
  Json devices = Json::object();
  for (const auto& [name, d] : db.devices()) {
    Json sizes = Json::object();
    for (int samples = 1; samples <= mbs; ++samples) {
      if (mbs % samples != 0) continue;
      Json fwd = Json::array(), bwd = Json::array();
      bool complete = true;
      for (const auto& l : model.layers) {
        auto e = db.find({name, l.signature, samples, 1});
        if (!e) {
          complete = false;
          break;
        }
        fwd.push_back(e->fwd_s);
        bwd.push_back(e->bwd_s);
      }
      if (complete) sizes[std::to_string(samples)] = {{"fwd_s", fwd}, {"bwd_s", bwd}};
    }
    // A device enters the table only with the full microbatch (check_cost_table's rule).
    if (!sizes.contains(std::to_string(mbs))) continue;
    devices[name] = sizes;
  }
  if (devices.empty())
    return not_found("no imported device has every layer at microbatch size " + std::to_string(mbs) +
                     "; use a size the profiles have (--microbatch-size)");
  const std::string any = devices.begin().key();
  for (const auto& l : model.layers) {
    auto e = db.find({any, l.signature, mbs, 1});
    layers.push_back({{"name", l.name},
                      {"param_bytes", e->param_bytes},
                      {"activation_bytes", e->activation_bytes / mbs},
                      {"output_bytes", l.output_bytes}});
  }
  return Json{{"version", 1}, {"microbatch_size", mbs}, {"layers", layers}, {"devices", devices}};
}

}  // namespace harp::profile
