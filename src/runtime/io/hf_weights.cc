// Hugging Face GPT-2 and LLaMA weights in and out (see hf_weights.h).
#include "harp/runtime/io/hf_weights.h"

#include "harp/model/hf_config.h"

#include <cmath>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "harp/common/format.h"
#include "harp/data/safetensors.h"
#include "harp/runtime/nn/gpt.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/nn/trainable.h"

namespace harp::runtime {
namespace {

namespace fs = std::filesystem;

std::string shape_text(torch::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

StatusOr<torch::Dtype> torch_dtype_of(const std::string& dtype) {
  if (dtype == "F32") return torch::kFloat32;
  if (dtype == "F64") return torch::kFloat64;
  if (dtype == "F16") return torch::kHalf;
  if (dtype == "BF16") return torch::kBFloat16;
  return invalid_argument("dtype " + dtype + " is not a floating-point weight type (F32, F64, F16, BF16)");
}

// The files of a checkpoint and which one holds each tensor.
class HfFiles {
 public:
  static StatusOr<HfFiles> open(const std::string& path, const std::string& architecture) {
    HfFiles f;
    f.architecture_ = architecture;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      const std::string index = path + "/model.safetensors.index.json";
      if (fs::exists(index, ec)) {
        HARP_ASSIGN_OR_RETURN(Json doc, load_document(index));
        const auto map = doc.find("weight_map");
        if (!doc.is_object() || map == doc.end() || !map->is_object())
          return invalid_argument(shown_path(index) + ": has no weight_map object {tensor: shard file}");
        for (const auto& [name, shard] : map->items()) {
          if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos)
            return invalid_argument(shown_path(index) + ": weight_map \"" + name.substr(0, 80) +
                                    "\" is not a shard file name of this folder");
          f.where_[name] = path + "/" + shard.get<std::string>();
        }
        return f;
      }
      f.single_ = path + "/model.safetensors";
      if (!fs::exists(f.single_, ec))
        return not_found(shown_path(path) + ": holds neither model.safetensors nor model.safetensors.index.json");
      return f;
    }
    f.single_ = path;
    return f;
  }

  // The file holding `name` and its entry; NotFound naming what was searched. GPT-2's
  // own files (openai-community/gpt2) name the tensors of GPT2Model, without the
  // "transformer." of GPT2LMHeadModel: a name not found is also looked up without it.
  StatusOr<std::pair<const data::SafetensorsFile*, const data::SafetensorsEntry*>> find(const std::string& name) {
    static const std::string kBase = "transformer.";
    auto found = find_exact(name);
    if (found.ok() || name.rfind(kBase, 0) != 0) return found;
    auto base = find_exact(name.substr(kBase.size()));
    return base.ok() ? base : found;
  }

  // The elements of every tensor the checkpoint's files hold (each file's header checked
  // against its size, so the figure is bounded by the bytes on disk).
  StatusOr<std::int64_t> total_elements() {
    std::set<std::string> files;
    if (!single_.empty()) files.insert(single_);
    for (const auto& [name, file] : where_) files.insert(file);
    std::int64_t total = 0;
    for (const std::string& file : files) {
      auto& header = headers_[file];
      if (!header) {
        HARP_ASSIGN_OR_RETURN(data::SafetensorsFile h, data::read_safetensors_header(file));
        header = std::make_unique<data::SafetensorsFile>(std::move(h));
      }
      for (const auto& e : header->tensors) total += e.numel();
    }
    return total;
  }

 private:
  StatusOr<std::pair<const data::SafetensorsFile*, const data::SafetensorsEntry*>> find_exact(const std::string& name) {
    std::string file = single_;
    if (file.empty()) {
      const auto it = where_.find(name);
      if (it == where_.end()) return not_found("the checkpoint's index names no tensor " + name);
      file = it->second;
    }
    auto& header = headers_[file];
    if (!header) {
      HARP_ASSIGN_OR_RETURN(data::SafetensorsFile h, data::read_safetensors_header(file));
      header = std::make_unique<data::SafetensorsFile>(std::move(h));
    }
    const data::SafetensorsEntry* e = header->find(name);
    if (e == nullptr)
      return not_found(shown_path(file) + ": has no tensor " + name + "; is it a " + architecture_ +
                       " checkpoint?");
    return std::pair<const data::SafetensorsFile*, const data::SafetensorsEntry*>(header.get(), e);
  }

  std::string architecture_;
  std::string single_;
  std::map<std::string, std::string> where_;
  std::map<std::string, std::unique_ptr<data::SafetensorsFile>> headers_;
};

}  // namespace

namespace {

// One family's names: those outside the blocks, the LM head's when tied, and those
// below "blockN." with the Hugging Face prefix of a block.
struct NameMap {
  const char* family;
  std::map<std::string, HfName> fixed;
  std::string tied_lm;
  std::string block_prefix;
  std::map<std::string, HfName> parts;
};

HfName map_name(const NameMap& map, const std::string& ours, bool tied) {
  if (ours == "head.lm.weight") return {tied ? map.tied_lm : "lm_head.weight", false};
  if (const auto it = map.fixed.find(ours); it != map.fixed.end()) return it->second;
  static const std::regex block(R"(block(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(ours, m, block)) {
    if (const auto it = map.parts.find(m[2].str()); it != map.parts.end())
      return {map.block_prefix + m[1].str() + "." + it->second.name, it->second.transposed};
  }
  return {};  // not one of this family's parameters: the caller says so
}

}  // namespace

HfName hf_llama_name(const std::string& ours, bool tied) {
  static const NameMap map = {
      "LLaMA",
      {{"embed.token.weight", {"model.embed_tokens.weight"}}, {"head.norm.weight", {"model.norm.weight"}}},
      "model.embed_tokens.weight",
      "model.layers.",
      {{"ln1.weight", {"input_layernorm.weight"}},
       {"attn.q.weight", {"self_attn.q_proj.weight"}},
       {"attn.k.weight", {"self_attn.k_proj.weight"}},
       {"attn.v.weight", {"self_attn.v_proj.weight"}},
       {"attn.q.bias", {"self_attn.q_proj.bias"}},  // Qwen2's
       {"attn.k.bias", {"self_attn.k_proj.bias"}},
       {"attn.v.bias", {"self_attn.v_proj.bias"}},
       {"attn.q_norm.weight", {"self_attn.q_norm.weight"}},  // Qwen3's
       {"attn.k_norm.weight", {"self_attn.k_norm.weight"}},
       {"attn.proj.weight", {"self_attn.o_proj.weight"}},
       {"ln2.weight", {"post_attention_layernorm.weight"}},
       {"mlp.gate.weight", {"mlp.gate_proj.weight"}},
       {"mlp.up.weight", {"mlp.up_proj.weight"}},
       {"mlp.down.weight", {"mlp.down_proj.weight"}}}};
  return map_name(map, ours, tied);
}

HfName hf_gpt2_name(const std::string& ours, bool tied) {
  static const NameMap map = {
      "GPT",
      {{"embed.token.weight", {"transformer.wte.weight"}},
       {"embed.position.weight", {"transformer.wpe.weight"}},
       {"head.ln_f.weight", {"transformer.ln_f.weight"}},
       {"head.ln_f.bias", {"transformer.ln_f.bias"}}},
      "transformer.wte.weight",
      "transformer.h.",
      {{"ln1.weight", {"ln_1.weight"}},
       {"ln1.bias", {"ln_1.bias"}},
       {"attn.qkv.weight", {"attn.c_attn.weight", true}},  // Conv1D: [in, out]
       {"attn.qkv.bias", {"attn.c_attn.bias"}},
       {"attn.proj.weight", {"attn.c_proj.weight", true}},
       {"attn.proj.bias", {"attn.c_proj.bias"}},
       {"ln2.weight", {"ln_2.weight"}},
       {"ln2.bias", {"ln_2.bias"}},
       {"mlp.fc1.weight", {"mlp.c_fc.weight", true}},
       {"mlp.fc1.bias", {"mlp.c_fc.bias"}},
       {"mlp.fc2.weight", {"mlp.c_proj.weight", true}},
       {"mlp.fc2.bias", {"mlp.c_proj.bias"}}}};
  return map_name(map, ours, tied);
}

HfName hf_name(const std::string& ours, const model::ModelSpec& model) {
  return model.family == "llama" ? hf_llama_name(ours, model.gpt.tied_embeddings)
                                 : hf_gpt2_name(ours, model.gpt.tied_embeddings);
}

Json hf_config(const model::ModelSpec& model) { return model::hf_config_json(model.gpt); }

namespace {

// Every parameter of `model` is in `params`, in its shape: a checkpoint that lost a stage
// (or one of another model) is not written out as half a model. The model's layers are
// built one at a time for their names and shapes (libtorch's modules cannot be built on
// the meta device), so the check holds one layer's memory at most.
Status check_complete(const model::ModelSpec& model, const NamedTensors& params) {
  std::map<std::string, const torch::Tensor*> given;
  for (const auto& [name, t] : params) given[name] = &t;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected;
  for (int l = 0; l < model.num_layers(); ++l)
    for (const auto& [name, p] : named_parameters(build_gpt_layers(model, l, l + 1, 0, torch::kFloat32, torch::kCPU)))
      expected.emplace_back(name, p.sizes().vec());
  int missing = 0;
  std::string first;
  for (const auto& [name, sizes] : expected) {
    auto it = given.find(name);
    if (it == given.end() && name == "head.lm.weight" && model.gpt.tied_embeddings)
      it = given.find("embed.token.weight");
    if (it == given.end()) {
      if (missing++ == 0) first = name;
      continue;
    }
    if (!it->second->sizes().equals(sizes))
      return invalid_argument("the checkpoint's `" + name + "` has " + std::to_string(it->second->numel()) +
                              " elements in another shape than " + model.gpt.name +
                              "'s; fix: export with the plan "
                              "(or --model) the run was trained with");
  }
  if (missing > 0)
    return failed_precondition("the checkpoint lacks " + std::to_string(missing) + " of " + model.gpt.name +
                               "'s parameters (`" + first +
                               "` first): it is incomplete or of another model; fix: "
                               "export a complete step with the plan (or --model) the run was trained with");
  return Status();
}

}  // namespace

Status export_hf(const model::ModelSpec& model, const NamedTensors& params, const std::string& out_dir,
                 std::int64_t max_shard_bytes) {
  HARP_RETURN_IF_ERROR(check_trainable(model));
  const bool tied = model.gpt.tied_embeddings;
  std::vector<data::SafetensorsTensor> out;
  for (const auto& [ours, tensor] : params) {
    if (ours.find(".exp_avg") != std::string::npos) continue;  // optimizer state
    if (tied && ours == "head.lm.weight") continue;             // tied to the token embedding
    const HfName hf = hf_name(ours, model);
    if (hf.name.empty())
      return invalid_argument("the checkpoint holds `" + ours.substr(0, 80) + "`, which is not a parameter of a " +
                              (model.family == "llama" ? "LLaMA" : "GPT") + " model (" + model.gpt.name +
                              "); fix: export with the plan (or --model) the run was trained with");
    torch::Tensor t = tensor.detach().to(torch::kCPU, torch::kFloat32);
    if (hf.transposed) t = t.t();
    t = t.contiguous();
    data::SafetensorsTensor st;
    st.name = hf.name;
    st.dtype = "F32";
    st.shape.assign(t.sizes().begin(), t.sizes().end());
    st.bytes.assign(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * 4);
    out.push_back(std::move(st));
  }
  HARP_RETURN_IF_ERROR(check_complete(model, params));  // after the names: a stray one is named first
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(shown_path(out_dir) + ": cannot create the output folder: " + ec.message());
  // Shards in order, each up to max_shard_bytes (a tensor larger than that alone), as
  // save_pretrained cuts them; one file when everything fits.
  std::vector<std::vector<data::SafetensorsTensor>> shards(1);
  std::int64_t in_shard = 0, total = 0;
  for (auto& t : out) {
    const auto bytes = static_cast<std::int64_t>(t.bytes.size());
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    in_shard += bytes;
    total += bytes;
    shards.back().push_back(std::move(t));
  }
  // The other layout's files go first: a folder never holds both an earlier export's
  // single file and this one's shards (or the reverse).
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" ||
        (name.rfind("model-", 0) == 0 && entry.path().extension() == ".safetensors"))
      fs::remove(entry.path(), ec);
  }
  if (shards.size() == 1) {
    HARP_RETURN_IF_ERROR(data::write_safetensors(out_dir + "/model.safetensors", shards[0], {{"format", "pt"}}));
  } else {
    Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", Json::object()}};
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file = fmt("model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      for (const auto& t : shards[i]) index["weight_map"][t.name] = file;
      HARP_RETURN_IF_ERROR(data::write_safetensors(out_dir + "/" + file, shards[i], {{"format", "pt"}}));
    }
    HARP_RETURN_IF_ERROR(write_text_file_atomic(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return write_text_file_atomic(out_dir + "/config.json", hf_config(model).dump(2) + "\n");
}

StatusOr<model::ModelSpec> hf_model(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return not_found(shown_path(path) + ": no such folder or file; give a Hugging Face folder (config.json and "
                     "model.safetensors, as harp export writes)");
  std::string folder = fs::is_directory(path, ec) ? path : fs::path(path).parent_path().string();
  if (folder.empty()) folder = ".";
  HARP_ASSIGN_OR_RETURN(model::GptConfig c, model::read_hf_config(folder));
  HARP_ASSIGN_OR_RETURN(model::ModelSpec m, model::build_gpt(c, shown_path(path), ""));
  HARP_RETURN_IF_ERROR(check_trainable(m));
  return m;
}

Status check_hf_size(const model::ModelSpec& model, const std::string& path) {
  HARP_ASSIGN_OR_RETURN(HfFiles files, HfFiles::open(path, model.family == "llama" ? "LLaMA" : "GPT-2"));
  HARP_ASSIGN_OR_RETURN(const std::int64_t held, files.total_elements());
  if (model.param_count() > held)
    return invalid_argument(shown_path(path) + ": config.json describes " + std::to_string(model.param_count()) +
                            " parameters but the weights hold " + std::to_string(held) +
                            " numbers; the config does not describe these weights (fix config.json, or use the "
                            "folder harp export wrote)");
  return Status();
}

Status load_hf(Executor& ex, const model::ModelSpec& model, const std::string& path) {
  return load_hf_params(model, path, ex.optimizer().params(),
                        [&ex](const std::string& name) -> const Shard& { return ex.shard_of(name); });
}

Status load_hf_params(const model::ModelSpec& model, const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& params,
                      const std::function<const Shard&(const std::string&)>& shard_of) {
  HARP_RETURN_IF_ERROR(check_trainable(model));
  const bool llama = model.family == "llama";
  HARP_ASSIGN_OR_RETURN(HfFiles files, HfFiles::open(path, llama ? "LLaMA (LlamaForCausalLM)" : "GPT-2 (GPT2LMHeadModel)"));
  torch::NoGradGuard no_grad;
  for (const auto& [ours, param] : params) {
    torch::Tensor p = param;
    const HfName hf = hf_name(ours, model);
    if (hf.name.empty()) return invalid_argument("`" + ours + "` has no Hugging Face name for " + model.family);
    const Shard& shard = shard_of(ours);  // the file holds the full tensor: keep this rank's part
    const std::vector<std::int64_t>& full = shard.full_shape;
    HARP_ASSIGN_OR_RETURN(auto found, files.find(hf.name));
    const auto& [file, entry] = found;
    const std::string what = shown_path(file->path) + ": tensor " + hf.name;
    auto dtype = torch_dtype_of(entry->dtype);
    if (!dtype.ok()) return invalid_argument(what + ": " + dtype.status().message());
    HARP_ASSIGN_OR_RETURN(std::string bytes, data::read_tensor_bytes(*file, *entry));
    torch::Tensor t = torch::from_blob(bytes.data(), entry->shape, torch::TensorOptions().dtype(*dtype)).clone();
    if (hf.transposed) {
      if (t.dim() != 2) return invalid_argument(what + " has shape " + shape_text(t.sizes()) + "; a Conv1D weight is 2-D");
      t = t.t();
    }
    if (ours == "embed.position.weight" && t.dim() == 2 && t.size(0) > full[0] && t.size(1) == full[1])
      t = t.narrow(0, 0, full[0]);  // GPT-2 has 1024 positions; a shorter seq_len uses the first
    if (!t.sizes().equals(full)) {
      std::string fix = llama ? "describe the checkpoint's model (its config.json: hidden_size, num_hidden_layers, "
                                "num_attention_heads, num_key_value_heads, intermediate_size, vocab_size)"
                              : "describe the checkpoint's model (its config.json: n_embd, n_layer, n_head, n_inner, "
                                "vocab_size, n_positions)";
      if (ours == "embed.token.weight" && t.dim() == 2 && t.size(1) == full[1])
        fix = "set the model's vocab to " + std::to_string(t.size(0));
      if (ours == "embed.position.weight" && t.dim() == 2 && t.size(1) == full[1])
        fix = "use a seq_len of at most " + std::to_string(t.size(0)) + " (the checkpoint's positions)";
      return invalid_argument(what + " is " + shape_text(t.sizes()) + (hf.transposed ? " (transposed back)" : "") +
                              " but the model's " + ours + " is " + shape_text(full) + "; " + fix);
    }
    // A NaN or infinite weight trains NaN losses from the first step on: refuse it here.
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>()) {
      const std::int64_t bad = (~torch::isfinite(t.to(torch::kFloat32))).flatten().nonzero()[0].item<std::int64_t>();
      return invalid_argument(what + ": element " + std::to_string(bad) + " of " + std::to_string(t.numel()) + " is " +
                              (std::isnan(t.flatten()[bad].item<double>()) ? "NaN" : "infinite") +
                              "; the weights are damaged or diverged: use a checkpoint from before, or start without "
                              "--init-from");
    }
    p.copy_(shard.take(t).to(p.dtype()));
  }
  return Status();
}

}  // namespace harp::runtime
