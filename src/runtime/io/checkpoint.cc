// Checkpoint files: a small self-describing binary format (header JSON + raw tensor
// bytes + checksum) so that a resume is bitwise and a truncated or corrupted file is
// refused with its name, not half loaded.
#include "harp/runtime/io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harp/common/check.h"
#include "harp/common/document.h"
#include "harp/common/memory_limit.h"
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

Status write_tensor_file(const std::string& path, const NamedTensors& tensors, long long counter,
                         const CheckpointId& id) {
  Json header = {{"counter", counter}, {"tensors", Json::array()}};
  if (id.step >= 0) header["id"] = {{"step", id.step}, {"stage", id.stage}, {"run", id.run}};
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

namespace {

// Reads a file front to back in pieces, hashing what it reads.
class HashedReader {
 public:
  explicit HashedReader(int fd) : fd_(fd) {}
  ~HashedReader() { ::close(fd_); }
  // Exactly n bytes into `to` (nullptr: read and hash them only); false at a short read.
  bool read(void* to, std::uint64_t n, bool hash = true) {
    char scratch[1 << 16];
    auto* out = static_cast<char*>(to);
    while (n > 0) {
      char* dst = out != nullptr ? out : scratch;
      const size_t want = out != nullptr ? static_cast<size_t>(std::min<std::uint64_t>(n, 1 << 26))
                                         : static_cast<size_t>(std::min<std::uint64_t>(n, sizeof scratch));
      const ssize_t got = ::read(fd_, dst, want);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      if (hash) sha_.update(dst, static_cast<size_t>(got));
      if (out != nullptr) out += got;
      n -= static_cast<std::uint64_t>(got);
    }
    return true;
  }
  std::string digest() { return sha_.hex(); }

 private:
  int fd_;
  Sha256 sha_;
};

}  // namespace

StatusOr<NamedTensors> read_tensor_file(const std::string& path, long long* counter, CheckpointId* id) {
  auto corrupt = [&](const std::string& why) {
    return invalid_argument(shown_path(path) + ": not a valid checkpoint file (" + why +
                            "); it may be truncated or from another program: resume from an earlier step");
  };
  // Checked before anything is read: a regular file, within the format's limit and the
  // machine's memory (the tensors are what is kept; nothing else is held whole).
  HARP_RETURN_IF_ERROR(check_path_text(path));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return io_error(shown_path(path) + ": cannot open: " + std::strerror(errno) + "; check the path");
  if (!S_ISREG(st.st_mode)) return io_error(shown_path(path) + ": is not a regular file; a checkpoint file is");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > static_cast<std::uint64_t>(kMaxCheckpointFileBytes))
    return io_error(shown_path(path) + ": is " + std::to_string(size) + " bytes, over the limit of " +
                    std::to_string(kMaxCheckpointFileBytes) + " bytes for a checkpoint file");
  if (const MemoryLimit mem = usable_memory(); mem.bytes > 0 && static_cast<double>(size) > mem.bytes)
    return io_error(shown_path(path) + ": holds " + std::to_string(size >> 20) +
                    " MiB of tensors but this process may use " +
                    std::to_string(static_cast<std::uint64_t>(mem.bytes) >> 20) + " MiB (" + mem.source +
                    "); resume on a machine with more, or on more stages (each rank reads its stage's files)");
  const size_t magic = std::strlen(kMagic);
  if (size < magic + kDigestChars) return corrupt("bad header");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return io_error(shown_path(path) + ": cannot open: " + std::strerror(errno) + "; check the path");
  HashedReader in(fd);
  std::string head(magic, '\0');
  if (!in.read(head.data(), magic)) return corrupt("bad header");
  if (head.compare(0, std::strlen(kOldMagic), kOldMagic) == 0)
    return invalid_argument(shown_path(path) + ": a checkpoint of an older HARP (FNV-1a checksum, format 1); "
                            "this version reads format 2 only: start the run again without --resume");
  if (head != kMagic) return corrupt("bad header");
  // The header's length, digits up to a newline; then the header (bounded: a document).
  std::uint64_t hlen = 0, used = magic;
  for (int k = 0;; ++k) {
    char c = 0;
    if (k > 12 || !in.read(&c, 1)) return corrupt("no header length");
    ++used;
    if (c == '\n' && k > 0) break;
    if (c < '0' || c > '9') return corrupt("header length is not a number");
    hlen = hlen * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (hlen > static_cast<std::uint64_t>(kMaxDocumentBytes) || hlen > size - kDigestChars - used)
    return corrupt("header length past the end");
  std::string htext(hlen, '\0');
  if (!in.read(htext.data(), hlen)) return corrupt("truncated header");
  used += hlen;
  auto header = parse_json_text(htext, shown_path(path));
  if (!header.ok() || !header->is_object() || !header->contains("tensors") || !(*header)["tensors"].is_array())
    return corrupt("header is not the expected JSON");
  const std::uint64_t data = size - kDigestChars - used;  // bytes of tensor data
  if (counter) {
    const Json& c = header->value("counter", Json(0));
    if (!c.is_number_integer()) return corrupt("counter is not an integer");
    *counter = c.get<long long>();
  }
  if (id) {
    *id = CheckpointId{};
    if (header->contains("id")) {
      const Json& j = (*header)["id"];
      const auto step = j.is_object() && j.contains("step") ? whole_number_in(j["step"], 0, 1 << 30) : std::nullopt;
      const auto stage = j.is_object() && j.contains("stage") ? whole_number_in(j["stage"], 0, 4095) : std::nullopt;
      if (!step || !stage || !j.contains("run") || !j["run"].is_string())
        return corrupt("its id lacks step, stage or run (or holds one out of range)");
      id->step = static_cast<int>(*step);
      id->stage = static_cast<int>(*stage);
      id->run = j["run"].get<std::string>();
    }
  }
  struct Entry {
    std::string name;
    torch::Tensor t;
    std::uint64_t offset, bytes;
  };
  std::vector<Entry> entries;
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
    entries.push_back({e["name"].get<std::string>(), t, offset, bytes});
  }
  // The body front to back (this format writes tensors in order), each tensor's bytes
  // straight into it; the digest covers every byte before it.
  std::vector<size_t> order(entries.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entries[a].offset < entries[b].offset; });
  std::uint64_t at = 0;
  for (size_t k : order) {
    Entry& e = entries[k];
    if (e.offset < at) return corrupt("tensors overlap");
    if (!in.read(nullptr, e.offset - at) || !in.read(e.t.data_ptr(), e.bytes)) return corrupt("truncated data");
    at = e.offset + e.bytes;
  }
  if (!in.read(nullptr, data - at)) return corrupt("truncated data");
  std::string stored(kDigestChars, '\0');
  if (!in.read(stored.data(), kDigestChars, /*hash=*/false)) return corrupt("truncated checksum");
  if (in.digest() != stored) return corrupt("checksum (SHA-256) mismatch");
  NamedTensors out;
  for (auto& e : entries) out.emplace_back(std::move(e.name), std::move(e.t));
  return out;
}

std::string checkpoint_step_dir(const std::string& dir, int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06d", step);
  return (std::filesystem::path(dir) / buf).string();
}

StatusOr<int> latest_checkpoint_step(const std::string& dir) {
  auto text = read_text_file((std::filesystem::path(dir) / "latest").string());
  if (!text.ok())
    return not_found(shown_path(dir) +
                     ": no complete checkpoint (no `latest` file): the run finished none; train with "
                     "--checkpoint-every N to write one (or start again without --resume)");
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
  // The manifest, written last, says the step is complete and names its stage count: a
  // step without one was stopped part-way (or damaged) and is not read, whatever stage
  // files it holds; a folder rewritten by a run on fewer stages may still hold a stopped
  // run's stage file of another layout, which must not be read either.
  const std::string fix = "; export or resume from a complete step (the run's `latest` names one)";
  std::error_code ec;
  if (!std::filesystem::is_directory(sd, ec)) return not_found(shown_path(sd) + ": no such checkpoint step" + fix);
  if (!std::filesystem::exists(sd + "/manifest.json", ec))
    return failed_precondition(shown_path(sd) +
                               ": has no manifest.json, which a run writes last: the step is "
                               "incomplete (the run stopped while writing it)" +
                               fix);
  HARP_ASSIGN_OR_RETURN(const Json manifest, load_document(sd + "/manifest.json"));
  if (!manifest.is_object())
    return invalid_argument(shown_path(sd) + "/manifest.json: is not an object; the manifest was edited or damaged" +
                            fix);
  // The manifest's run id: every stage file must carry it (format 4 on).
  const std::string run =
      manifest.contains("run") && manifest["run"].is_string() ? manifest["run"].get<std::string>() : "";
  std::vector<std::string> files;
  if (manifest.contains("layout") && manifest["layout"].is_object() && manifest["layout"].contains("stages") &&
      manifest["layout"]["stages"].is_array() && !manifest["layout"]["stages"].empty()) {
    for (size_t s = 0; s < manifest["layout"]["stages"].size(); ++s)
      files.push_back(sd + "/stage_" + std::to_string(s) + ".bin");
  } else {  // a manifest of a format before the layout: every stage file of the step
    for (const auto& e : std::filesystem::directory_iterator(sd, ec))
      if (e.path().extension() == ".bin") files.push_back(e.path().string());
    if (ec || files.empty()) return not_found(shown_path(sd) + ": no stage files; the checkpoint is incomplete" + fix);
    std::sort(files.begin(), files.end());
  }
  const size_t stages = files.size();
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string& f = files[k];
    if (!std::filesystem::exists(f))
      return not_found(shown_path(f) + ": is missing (stage " + std::to_string(k) + " of " + std::to_string(stages) +
                       " the manifest names); the checkpoint is incomplete" + fix);
    long long counter = 0;
    CheckpointId id;
    HARP_ASSIGN_OR_RETURN(NamedTensors part, read_tensor_file(f, &counter, &id));
    if (!run.empty() && (id.step != step || id.stage != static_cast<int>(k) || id.run != run))
      return failed_precondition(
          shown_path(f) + ": holds " +
          (id.step < 0 ? std::string("no checkpoint id")
                       : "stage " + std::to_string(id.stage) + " of step " + std::to_string(id.step) + " of run " +
                             id.run.substr(0, 20)) +
          ", but this is stage " + std::to_string(k) + " of step " + std::to_string(step) + " of run " + run +
          " (manifest.json): the file was copied or moved from another checkpoint; restore it, or resume from "
          "another step (write its number to " + shown_path(dir) + "/latest)");
    if (optimizer_steps) *optimizer_steps = counter;
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

std::string checkpoint_run_id(const std::string& dir, int step) {
  auto manifest = load_document(checkpoint_step_dir(dir, step) + "/manifest.json");
  if (!manifest.ok() || !manifest->is_object() || !manifest->contains("run") || !(*manifest)["run"].is_string())
    return "";
  return (*manifest)["run"].get<std::string>();
}

std::string new_run_id(Transport& comm) {
  // 52 random bits: a float64 holds them exactly through the all-reduce (a sum of rank 0's
  // draw and zeros), which every transport supports on the CPU.
  double drawn = 0;
  if (comm.layout().rank == 0) {
    std::random_device rd;
    const std::uint64_t bits = ((static_cast<std::uint64_t>(rd()) << 32) | rd()) & ((1ull << 52) - 1);
    drawn = static_cast<double>(bits);
  }
  torch::Tensor t = torch::full({1}, drawn, torch::kFloat64);
  comm.allreduce_world(t, "the run id");
  char buf[20];
  std::snprintf(buf, sizeof buf, "%013llx", static_cast<unsigned long long>(t.item<double>()));
  return buf;
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
