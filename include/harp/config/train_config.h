// The training configuration of a run: the job file's `training:` section, overridden
// by `harp train` flags, validated once, and written fully resolved into the run folder
// (OUT/train_config.json). Torch-free, so `harp plan` checks a job's training section
// too (it is part of the job library's load).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/common/status.h"
#include "harp/config/names.h"

namespace harp::config {

struct TrainConfig {
  // Token file (uint16 .bin, `harp data prepare`) or "synthetic" (seeded random tokens).
  // A relative path is relative to the job file.
  std::string data = "synthetic";
  int steps = 10;                  // total steps (a resumed run continues up to it), >= 1
  std::uint64_t seed = 1234;       // weights and data order
  double lr = 3e-4;                // peak learning rate, > 0
  double min_lr = 0;               // floor of the cosine decay; 0: lr / 10
  int warmup_steps = 10;           // linear warm-up steps, >= 1
  int decay_steps = 0;             // cosine decay ends here; 0: max(steps, warmup_steps + 1)
  double weight_decay = 0.1;       // AdamW, on 2+-dimensional parameters, >= 0
  double grad_clip = 1.0;          // max global gradient norm; 0 disables clipping
  // float32 | float64 | bfloat16 | float16 (float32 master weights and state, autocast
  // compute and cut tensors in the low-precision dtype: runtime/precision.h; float16
  // computes on CUDA only, with dynamic loss scaling)
  Dtype dtype = Dtype::kFloat32;
  // cpu | cuda | auto: the GPU LOCAL_RANK names (cuda:LOCAL_RANK, as torchrun's ranks
  // use) when libtorch sees CUDA, else the CPU. On CUDA the ranks exchange tensors over
  // NCCL (comm.h).
  Device device = Device::kAuto;
  // Dynamic loss scaling (precision.h): auto (on for float16) | dynamic | none.
  LossScale loss_scale = LossScale::kAuto;
  // The dtype of the data-parallel gradient all-reduce: auto (the gradients' own:
  // float32, or float64 in a float64 run) | float32 | float16 | bfloat16 (the gradients
  // are cast for the reduction and back; Gloo cannot reduce bfloat16).
  GradReduceDtype grad_reduce_dtype = GradReduceDtype::kAuto;
  // Activation recomputation (common/recompute.h): "plan" (each stage as its plan says),
  // or none | selective | full for every stage.
  RunRecompute recompute = RunRecompute::kPlan;
  // Sharded optimizer state (runtime/exec/zero.h): "plan" (each stage as its plan says),
  // or 0 | 1 | 2 for every stage (ZeRO-1: Adam's moments, ZeRO-2: and the gradients,
  // over each stage's data-parallel group).
  RunZero zero = RunZero::kPlan;
  std::string out = "out/train";   // metrics, traces, checkpoints; relative to the cwd
  int checkpoint_every = 0;        // steps between checkpoints; 0: none
  int keep_checkpoints = 0;        // the newest K complete checkpoints are kept; 0: all
  bool async_checkpoints = true;   // written behind the next steps (checkpoint_writer.h)
  std::vector<int> trace_steps;    // 0-based steps whose measured timeline is written
  double timeout_s = 60;           // a peer silent this long has failed, > 0
  int threads = 1;                 // intra-op threads per rank, 1..256
  bool emulate = false;            // apply the plan's emulated device slowdowns
  bool progress = true;            // rank 0 prints a line per step
  // Hugging Face GPT-2 weights to start from (a .safetensors file or a folder with
  // model.safetensors or its index and shards); "" for the seeded initialisation. A
  // relative path is relative to the job file. Ignored when resuming.
  std::string init_from;
  // Validation token file ("" for none; relative to the job file), evaluated every
  // eval_every steps (>= 1) and after the last, on eval_batches global batches (>= 1).
  std::string val_data;
  int eval_every = 100;
  int eval_batches = 2;
  // A sample every sample_every steps (0: none; after the last step too): rank 0 prints
  // sample_tokens tokens continuing sample_prompt (nanoGPT's default start: a newline),
  // tokenized by sample_tokenizer ("byte" or a GPT-2 BPE file or folder; SentencePiece
  // cannot load beside libtorch: use harp generate on a checkpoint).
  int sample_every = 0;
  std::string sample_prompt = "\n";
  int sample_tokens = 64;
  std::string sample_tokenizer = "byte";
  // Drift detection (runtime/io/drift.h): a stage whose compute per microbatch leaves the
  // run's own baseline by more than drift_threshold x (> 1; 0: off), medians over
  // drift_window steps, is reported.
  double drift_threshold = 0;
  int drift_window = 5;
  // Re-planning on drift (harp launch --elastic; launch/elastic.h): adopt a plan made for
  // the drifted costs when it is predicted at least this fraction faster over the steps
  // left, counting the restart; 0: off (drifts are only reported). Needs drift_threshold.
  double replan_min_gain = 0;
  // Link probes between stages on subclusters the plan does not join, every this many
  // steps (0: none; runtime/trainer.h). harp launch --elastic sets it when it re-plans.
  int link_probe_every = 0;

  // The first broken rule, naming `file` and the field path under `path`.
  Status validate(const std::string& file, const std::string& path = "training") const;
};

// Reads a `training:` section (every key optional; unknown keys are refused).
StatusOr<TrainConfig> parse_train_config(const Json& node, const std::string& file,
                                         const std::string& path = "training");
Json train_config_to_json(const TrainConfig& config);

}  // namespace harp::config
