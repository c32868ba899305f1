// Checkpoint files: a small self-describing binary format (header JSON + raw tensor
// bytes + checksum) so that a resume is bitwise and a truncated or corrupted file is
// refused with its name, not half loaded.
#include "harp/runtime/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "harp/common/document.h"
#include "harp/common/hash.h"

namespace harp::runtime {
namespace {

constexpr char kMagic[] = "HARPCKPT1\n";

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
  text += hex_fingerprint(text);
  return write_text_file_atomic(path, text);
}

StatusOr<NamedTensors> read_tensor_file(const std::string& path, long long* counter) {
  HARP_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  const size_t magic = std::strlen(kMagic);
  auto corrupt = [&](const std::string& why) {
    return invalid_argument(shown_path(path) + ": not a valid checkpoint file (" + why +
                            "); it may be truncated or from another program: resume from an earlier step");
  };
  if (text.size() < magic + 16 || text.compare(0, magic, kMagic) != 0) return corrupt("bad header");
  const std::string stored = text.substr(text.size() - 16);
  text.resize(text.size() - 16);
  if (hex_fingerprint(text) != stored) return corrupt("checksum mismatch");
  const size_t nl = text.find('\n', magic);
  if (nl == std::string::npos) return corrupt("no header length");
  const size_t hlen = std::stoul(text.substr(magic, nl - magic));
  auto header = parse_json_text(text.substr(nl + 1, hlen), path);
  if (!header.ok()) return corrupt("header is not JSON");
  const size_t base = nl + 1 + hlen;
  if (counter) *counter = (*header).value("counter", 0LL);
  NamedTensors out;
  for (const auto& e : (*header)["tensors"]) {
    torch::Dtype dtype;
    if (!dtype_from(e["dtype"].get<std::string>(), &dtype)) return corrupt("unknown dtype");
    const size_t offset = e["offset"].get<size_t>(), bytes = e["bytes"].get<size_t>();
    if (base + offset + bytes > text.size()) return corrupt("tensor data out of range");
    torch::Tensor t = torch::empty(e["shape"].get<std::vector<int64_t>>(), torch::TensorOptions().dtype(dtype));
    if (static_cast<size_t>(t.numel()) * t.element_size() != bytes) return corrupt("size mismatch");
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
  try {
    return std::stoi(*text);
  } catch (...) {
    return invalid_argument(dir + "/latest: not a step number; delete it or fix it");
  }
}

Status mark_checkpoint_complete(const std::string& dir, int step, const std::string& manifest_json) {
  HARP_RETURN_IF_ERROR(write_text_file_atomic(checkpoint_step_dir(dir, step) + "/manifest.json", manifest_json));
  return write_text_file_atomic((std::filesystem::path(dir) / "latest").string(), std::to_string(step) + "\n");
}

StatusOr<NamedTensors> read_checkpoint(const std::string& dir, int step, long long* optimizer_steps) {
  NamedTensors all;
  const std::string sd = checkpoint_step_dir(dir, step);
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(sd, ec))
    if (e.path().extension() == ".bin") files.push_back(e.path().string());
  if (ec || files.empty()) return not_found(sd + ": no stage files; the checkpoint is incomplete");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    long long counter = 0;
    HARP_ASSIGN_OR_RETURN(NamedTensors part, read_tensor_file(f, &counter));
    if (optimizer_steps) *optimizer_steps = counter;
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

Status save_checkpoint(Executor& ex, Transport& comm, const std::string& dir, int steps_done,
                       const plan::Plan& plan) {
  const RankLayout& l = comm.layout();
  const std::string sd = checkpoint_step_dir(dir, steps_done);
  std::error_code ec;
  std::filesystem::create_directories(sd, ec);
  if (ec) return io_error(sd + ": cannot create the checkpoint folder: " + ec.message());
  if (l.dp_rank == 0) {
    NamedTensors tensors = ex.optimizer().params();
    for (auto& s : ex.optimizer().state()) tensors.push_back(s);
    HARP_RETURN_IF_ERROR(write_tensor_file(sd + "/stage_" + std::to_string(l.stage) + ".bin", tensors,
                                           ex.optimizer().steps_taken()));
  }
  comm.barrier("checkpoint of step " + std::to_string(steps_done));
  if (l.rank == 0) {
    Json manifest = {{"step", steps_done}, {"stages", plan.num_stages()}, {"microbatches", plan.microbatches},
                     {"schedule", plan::schedule_kind_name(plan.schedule)}};
    HARP_RETURN_IF_ERROR(mark_checkpoint_complete(dir, steps_done, manifest.dump(2) + "\n"));
  }
  return Status();
}

Status load_checkpoint(Executor& ex, const std::string& dir, int step) {
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
    if (!it->second.sizes().equals(p.sizes()))
      return invalid_argument(checkpoint_step_dir(dir, step) + ": parameter `" + name + "` has another shape");
    p.copy_(it->second);
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
      auto s = by_name.find(name + suffix);
      if (s != by_name.end()) state.emplace_back(s->first, s->second);
    }
  }
  std::string error;
  if (!ex.optimizer().load_state(state, opt_steps, &error))
    return invalid_argument(checkpoint_step_dir(dir, step) + ": optimizer state: " + error);
  return Status();
}

}  // namespace harp::runtime
