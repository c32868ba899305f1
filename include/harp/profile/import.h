// Measurements taken by other tools, read into a profile DB (torch-free). Two layouts of
// the Metis profile format (per-layer JSON: model.num_layers,
// model.parameters.parameters_per_layer_bytes, .activation_parameters_bytes,
// execution_time.layer_compute_total_ms, .optimizer_time_ms,
// execution_memory.layer_memory_total_mb):
//   sailor: DIR/<GPU>/mbs<B>_tmp<T>.json         (Sailor's published profiles)
//   metis:  DIR/DeviceType.<GPU>_tp<T>_bs<B>.json (Metis's profile folder)
// The files' layers are embedding, whole blocks, LM head: the model must be the matching
// GPT at granularity 1 (2 + R layers). What the files lack, and the rule used instead
// (docs/file_formats.md, "Importing measurements"):
//   - forward and backward are one number: forward 1/3, backward 2/3 of it;
//   - a signature shared by several layers (the blocks) takes the lower median of their
//     times, so the value is one of the file's own;
//   - parameters are fp32 bytes in the files, fp16 bytes in HARP: halved;
//   - the optimizer's time per parameter byte is optimizer_time_ms over those fp16 bytes.
#pragma once

#include <map>
#include <string>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/profile/profile_db.h"

namespace harp::profile {

struct ImportRequest {
  std::string format;  // sailor | metis
  std::string dir;
  // Source GPU name -> HARP device type. Empty: every GPU of the folder, under its
  // built-in name (import_device_name); else only the GPUs named here.
  std::map<std::string, std::string> gpu_names;
};

// The built-in mapping of the sources' GPU names to the device catalogue (A100-40 ->
// A100-40GB, V100-16 -> V100-16GB, GH-96 -> GH200, RTX-3090 -> RTX3090, ...); the name
// itself when it has none.
std::string import_device_name(const std::string& gpu);

// InvalidArgument/NotFound/IoError naming the file and field for anything unreadable, a
// layer count that does not match `model`, or a folder with no profile in it.
StatusOr<ProfileDb> import_profiles(const ImportRequest& request, const model::ModelSpec& model);

// A cost table (docs/file_formats.md) for microbatch size `mbs` from imported entries:
// what `harp plan --costs` and bench/plan_process.py read. Devices without every layer
// at `mbs` are left out; NotFound when none has them.
StatusOr<Json> cost_table_json(const ProfileDb& db, const model::ModelSpec& model, int mbs);

}  // namespace harp::profile
