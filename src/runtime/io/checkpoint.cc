// Checkpoint files: a small self-describing binary format (header JSON + raw tensor
// bytes + checksum) so that a resume is bitwise and a truncated or corrupted file is
// refused with its name, not half loaded.
#include "harp/runtime/io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "harp/common/check.h"
#include "harp/common/document.h"
#include "harp/common/fields.h"
#include "harp/common/sha256.h"

namespace harp::runtime {
namespace {

constexpr char kMagic[] = "HARPCKPT2\n";
constexpr char kOldMagic[] = "HARPCKPT1\n";  // FNV-1a trailer: refused with a message
constexpr size_t kDigestChars = 64;           // hex SHA-256 trailer
// A stage's weights and optimizer state; far beyond what fits one device today.
constexpr std::int64_t kMaxCheckpointFileBytes = 1ll << 40;

std::string dtype_name(torch::Dtype d) {
  switch (d) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kInt64: return "int64";
    default: return "unsupported";
  }
}

bool dtype_from(const std::string& s, torch::Dtype* d) {
  if (s == "float32") *d = torch::kFloat32;
  else if (s == "float64") *d = torch::kFloat64;
  else if (s == "int64") *d = torch::kInt64;
  else return false;
  return true;
}

}  // namespace

Status write_tensor_file(const std::string& path, const NamedTensors& tensors, long long counter) {
  Json header = {{"counter", counter}, {"tensors", Json::array()}};
  std::string body;
  for (const auto& [name, t] : tensors) {
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
    header["tensors"].push_back({{"name", name},
                                 {"dtype", dtype_name(c.scalar_type())},
                                 {"shape", c.sizes().vec()},
                                 {"offset", body.size()},
                                 {"bytes", bytes}});
    body.append(static_cast<const char*>(c.data_ptr()), bytes);
  }
  std::string text = kMagic;
  const std::string h = header.dump();
  text += std::to_string(h.size()) + "\n" + h + body;
  text += sha256_hex(text);
  return write_text_file_atomic(path, text);
}

StatusOr<NamedTensors> read_tensor_file(const std::string& path, long long* counter) {
  HARP_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxCheckpointFileBytes));
  const size_t magic = std::strlen(kMagic);
  auto corrupt = [&](const std::string& why) {
    return invalid_argument(shown_path(path) + ": not a valid checkpoint file (" + why +
                            "); it may be truncated or from another program: resume from an earlier step");
  };
  if (text.compare(0, std::strlen(kOldMagic), kOldMagic) == 0)
    return invalid_argument(shown_path(path) + ": a checkpoint of an older HARP (FNV-1a checksum, format 1); "
                            "this version reads format 2 only: start the run again without --resume");
  if (text.size() < magic + kDigestChars || text.compare(0, magic, kMagic) != 0) return corrupt("bad header");
  const std::string stored = text.substr(text.size() - kDigestChars);
  text.resize(text.size() - kDigestChars);
  if (sha256_hex(text) != stored) return corrupt("checksum (SHA-256) mismatch");
  // Everything below is covered by the digest, but is still checked as untrusted input.
  const size_t nl = text.find('\n', magic);
  if (nl == std::string::npos || nl == magic || nl - magic > 12) return corrupt("no header length");
  size_t hlen = 0;
  for (size_t k = magic; k < nl; ++k) {
    if (text[k] < '0' || text[k] > '9') return corrupt("header length is not a number");
    hlen = hlen * 10 + static_cast<size_t>(text[k] - '0');
  }
  if (hlen > text.size() - nl - 1) return corrupt("header length past the end");
  auto header = parse_json_text(text.substr(nl + 1, hlen), shown_path(path));
  if (!header.ok() || !header->is_object() || !header->contains("tensors") || !(*header)["tensors"].is_array())
    return corrupt("header is not the expected JSON");
  const size_t base = nl + 1 + hlen;
  const size_t data = text.size() - base;  // bytes of tensor data
  if (counter) {
    const Json& c = header->value("counter", Json(0));
    if (!c.is_number_integer()) return corrupt("counter is not an integer");
    *counter = c.get<long long>();
  }
  NamedTensors out;
  for (const auto& e : (*header)["tensors"]) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("dtype") ||
        !e["dtype"].is_string() || !e.contains("shape") || !e["shape"].is_array() || !e.contains("offset") ||
        !e["offset"].is_number_unsigned() || !e.contains("bytes") || !e["bytes"].is_number_unsigned())
      return corrupt("a tensor entry lacks name, dtype, shape, offset or bytes");
    torch::Dtype dtype;
    if (!dtype_from(e["dtype"].get<std::string>(), &dtype)) return corrupt("unknown dtype");
    const std::uint64_t offset = e["offset"].get<std::uint64_t>(), bytes = e["bytes"].get<std::uint64_t>();
    // No sum can wrap: each term is compared with what is left.
    if (offset > data || bytes > data - offset) return corrupt("tensor data out of range");
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0 || d.get<std::int64_t>() > (1ll << 40))
        return corrupt("a shape entry is not a size");
      shape.push_back(d.get<std::int64_t>());
      if (shape.back() != 0 && numel > data / static_cast<std::uint64_t>(shape.back()))
        return corrupt("shape larger than the file");
      numel *= static_cast<std::uint64_t>(shape.back());
    }
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
    if (numel * static_cast<std::uint64_t>(t.element_size()) != bytes) return corrupt("size mismatch");
    std::memcpy(t.data_ptr(), text.data() + base + offset, bytes);
    out.emplace_back(e["name"].get<std::string>(), t);
  }
  return out;
}

std::string checkpoint_step_dir(const std::string& dir, int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06d", step);
  return (std::filesystem::path(dir) / buf).string();
}

StatusOr<int> latest_checkpoint_step(const std::string& dir) {
  auto text = read_text_file((std::filesystem::path(dir) / "latest").string());
  if (!text.ok()) return not_found(dir + ": no complete checkpoint (no `latest` file); start without --resume");
  std::string digits = *text;
  while (!digits.empty() && (digits.back() == '\n' || digits.back() == ' ')) digits.pop_back();
  bool ok = !digits.empty() && digits.size() <= 9;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  if (!ok) return invalid_argument(dir + "/latest: `" + digits.substr(0, 40) + "` is not a step number; delete the "
                                   "file to start again, or write the last complete step");
  return std::stoi(digits);
}

Status mark_checkpoint_complete(const std::string& dir, int step, const std::string& manifest_json) {
  HARP_RETURN_IF_ERROR(write_text_file_atomic(checkpoint_step_dir(dir, step) + "/manifest.json", manifest_json));
  return write_text_file_atomic((std::filesystem::path(dir) / "latest").string(), std::to_string(step) + "\n");
}

StatusOr<NamedTensors> read_checkpoint(const std::string& dir, int step, long long* optimizer_steps) {
  NamedTensors all;
  const std::string sd = checkpoint_step_dir(dir, step);
  // The manifest names the stage count: a folder rewritten by a run on fewer stages may
  // still hold a stopped run's stage file of another layout, which must not be read.
  int stages = -1;
  if (auto manifest = load_document(sd + "/manifest.json"); manifest.ok() && manifest->is_object() &&
      manifest->contains("layout") && (*manifest)["layout"].is_object() &&
      (*manifest)["layout"].contains("stages") && (*manifest)["layout"]["stages"].is_array())
    stages = static_cast<int>((*manifest)["layout"]["stages"].size());
  std::vector<std::string> files;
  if (stages > 0) {
    for (int s = 0; s < stages; ++s) files.push_back(sd + "/stage_" + std::to_string(s) + ".bin");
  } else {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(sd, ec))
      if (e.path().extension() == ".bin") files.push_back(e.path().string());
    if (ec || files.empty()) return not_found(sd + ": no stage files; the checkpoint is incomplete");
    std::sort(files.begin(), files.end());
  }
  for (const auto& f : files) {
    if (!std::filesystem::exists(f)) return not_found(f + ": is missing; the checkpoint is incomplete");
    long long counter = 0;
    HARP_ASSIGN_OR_RETURN(NamedTensors part, read_tensor_file(f, &counter));
    if (optimizer_steps) *optimizer_steps = counter;
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

Status prune_checkpoints(const std::string& dir, int keep) {
  HARP_CHECK_GE(keep, 1);
  HARP_ASSIGN_OR_RETURN(const int latest, latest_checkpoint_step(dir));
  std::vector<int> steps;  // every step folder's number, newest first
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int step = -1;
    if (e.is_directory() && name.size() == 11 && name.rfind("step_", 0) == 0 &&
        name.find_first_not_of("0123456789", 5) == std::string::npos)
      step = std::stoi(name.substr(5));
    if (step >= 0 && step <= latest) steps.push_back(step);
  }
  if (ec) return io_error(dir + ": cannot list the checkpoints: " + ec.message());
  std::sort(steps.rbegin(), steps.rend());
  int complete = 0;
  for (int step : steps) {
    const std::string sd = checkpoint_step_dir(dir, step);
    if (complete < keep) {
      complete += std::filesystem::exists(sd + "/manifest.json") ? 1 : 0;
      continue;
    }
    std::filesystem::remove_all(sd, ec);
    if (ec) return io_error(sd + ": cannot remove an old checkpoint: " + ec.message());
  }
  return Status();
}

Json checkpoint_layout(const plan::Plan& plan, std::uint64_t seed) {
  // Not the tp degrees (nor so the world size): files hold full tensors.
  Json stages = Json::array();
  for (const auto& s : plan.stages) stages.push_back({s.first_layer, s.last_layer, s.dp});
  return {{"model_fingerprint", plan.model_fingerprint},
          {"microbatches", plan.microbatches},
          {"microbatch_size", plan.microbatch_size},
          {"schedule", plan::schedule_kind_name(plan.schedule)},
          {"stages", stages},
          {"seed", std::to_string(seed)}};
}

namespace {

// What a resumed run must share with the checkpoint's: the model, the global batch (the
// samples of a step and the loss's normalisation) and the seed (the data order). The
// stage cuts, dp, tp, schedule and microbatch split may all differ.
Json resume_key(const Json& layout) {
  Json key = Json::object();
  for (const char* field : {"model_fingerprint", "seed"})
    if (layout.contains(field)) key[field] = layout[field];
  if (layout.contains("microbatches") && layout["microbatches"].is_number_integer() &&
      layout.contains("microbatch_size") && layout["microbatch_size"].is_number_integer())
    key["global_batch"] = layout["microbatches"].get<long long>() * layout["microbatch_size"].get<long long>();
  return key;
}

const char* resume_fix(const std::string& key) {
  if (key == "model_fingerprint") return "resume with the model the checkpoint was trained on";
  if (key == "seed") return "resume with the seed the run was started with (--seed)";
  return "keep microbatches x microbatch_size equal to the checkpoint's (re-plan with its global batch)";
}

// Dynamic loss scaling's state, as GradScaler's state_dict: a run without scaling
// ignores it; one with scaling resumed from a checkpoint without it (a float32 run
// continued in float16) starts at its first scale.
Status load_loss_scaler(LossScaler& scaler, const Json& manifest, const std::string& file) {
  if (!scaler.enabled() || !manifest.contains("loss_scaler")) return Status();
  const Json& state = manifest["loss_scaler"];
  const char* fix = "the manifest was edited or damaged: restore it, or resume from an earlier step";
  const Json* scale = state.is_object() && state.contains("scale") ? &state["scale"] : nullptr;
  int exponent = 0;
  if (scale == nullptr || !scale->is_number() || !std::isfinite(scale->get<double>()) ||
      std::frexp(scale->get<double>(), &exponent) != 0.5 || scale->get<double>() < LossScaler::kMinScale)
    return field_error(file, "loss_scaler.scale", scale ? scale->dump() : "(missing)",
                       "must be a finite power of two, at least 1", fix);
  const Json* good = state.contains("good_steps") ? &state["good_steps"] : nullptr;
  if (good == nullptr || !good->is_number_integer() || good->get<long long>() < 0 ||
      good->get<long long>() >= scaler.growth_interval)
    return field_error(file, "loss_scaler.good_steps", good ? good->dump() : "(missing)",
                       "must be an integer in [0, " + std::to_string(scaler.growth_interval) + ")", fix);
  scaler.scale = scale->get<double>();
  scaler.good_steps = static_cast<int>(good->get<long long>());
  return Status();
}

// A checkpoint's manifest (FILE), once its layout is checked against this run's.
StatusOr<Json> checked_manifest(const std::string& file, const Json& layout) {
  HARP_ASSIGN_OR_RETURN(Json manifest, load_document(file));
  if (!manifest.is_object() || !manifest.contains("layout") || !manifest["layout"].is_object())
    return field_error(file, "layout", "", "is missing: the checkpoint's layout is unknown",
                       "resume only from checkpoints this version wrote; start again without --resume");
  const Json was = resume_key(manifest["layout"]), now = resume_key(layout);
  for (const auto& [key, value] : now.items()) {
    if (!was.contains(key)) continue;  // an older manifest: nothing recorded to compare
    if (was[key] == value || (key == "model_fingerprint" && (value == "" || was[key] == ""))) continue;
    return failed_precondition(file + ": the checkpoint was written with " + key + " = " + was[key].dump() +
                               ", this run has " + value.dump() + "; " + resume_fix(key));
  }
  return manifest;
}

}  // namespace

Status load_checkpoint(Executor& ex, const std::string& dir, int step, const Json& layout) {
  const std::string manifest_file = checkpoint_step_dir(dir, step) + "/manifest.json";
  HARP_ASSIGN_OR_RETURN(const Json manifest, checked_manifest(manifest_file, layout));
  long long opt_steps = 0;
  HARP_ASSIGN_OR_RETURN(NamedTensors all, read_checkpoint(dir, step, &opt_steps));
  std::map<std::string, torch::Tensor> by_name(all.begin(), all.end());
  torch::NoGradGuard no_grad;
  NamedTensors state;
  for (auto& [name, p] : ex.optimizer().params()) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      return not_found(checkpoint_step_dir(dir, step) + ": has no parameter `" + name +
                       "`; the checkpoint is of another model");
    const Shard& shard = ex.shard_of(name);  // the files hold full tensors: keep this rank's part
    if (!it->second.sizes().equals(shard.full_shape))
      return invalid_argument(checkpoint_step_dir(dir, step) + ": parameter `" + name + "` has another shape");
    p.copy_(shard.take(it->second));
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
      auto s = by_name.find(name + suffix);
      if (s != by_name.end() && s->second.sizes().equals(shard.full_shape))
        state.emplace_back(s->first, shard.take(s->second));
      else if (s != by_name.end())
        return invalid_argument(checkpoint_step_dir(dir, step) + ": `" + s->first + "` has another shape");
    }
  }
  std::string error;
  if (!ex.optimizer().load_state(state, opt_steps, &error))
    return invalid_argument(checkpoint_step_dir(dir, step) + ": optimizer state: " + error);
  return load_loss_scaler(ex.loss_scaler(), manifest, manifest_file);
}

}  // namespace harp::runtime
