// Sharded optimizer state over a stage's data-parallel group (ZeRO, Rajbhandari et al.;
// Megatron's distributed optimizer): per stage, `zero` 0, 1 or 2 (plan::Stage::zero).
//
// The parameters the group reduces (all but a tied embedding, which has its own group)
// are laid end to end in one flat vector, padded with zeros to a multiple of dp and cut
// into dp equal chunks; replica d owns chunk d. Its AdamW keeps Adam's moments for those
// elements only (AdamW::Range) and updates only them:
//   level 1  the gradients are summed with a reduce-scatter (each replica receives the
//            sum of its chunk), the owned parameters stepped, and the updated
//            parameters all-gathered, so that every replica holds them whole again;
//   level 2  as 1, and the gradients are freed once copied into the reduction's buffer:
//            between steps a replica holds no gradient (they are rebuilt by the next
//            backward), and after the reduction only its chunk.
// Both collectives go bucket by bucket (a bounded buffer). The float32 parameters are
// the master weights (bf16/fp16 compute under autocast, runtime/nn/precision.h): they
// stay whole on every replica, as the forward needs them.
// The global gradient norm is summed over the owned chunks; an overflow anywhere makes
// it infinite, so every replica skips the step together. Checkpoints hold whole tensors
// (gather_state), so a sharded run resumes on any plan and any plan resumes sharded.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "harp/runtime/comm/transport.h"
#include "harp/runtime/exec/optimizer.h"

namespace harp::runtime {

class ZeroShards {
 public:
  // `params`: the optimizer's, in its order; `reduced[i]`: parameter i is summed over the
  // data-parallel group (false: it is not sharded, its replica updates it whole).
  // REQUIRES: level 1 or 2; dp >= 2; the parameters are contiguous.
  ZeroShards(int level, int dp, int dp_rank, const std::vector<torch::Tensor>& params, std::vector<bool> reduced);

  int level() const { return level_; }
  // The elements of each parameter this replica owns (AdamW's constructor).
  const std::vector<AdamW::Range>& owned() const { return owned_; }
  // Elements in the flat vector, and per replica after padding.
  std::int64_t flat_numel() const { return numel_; }
  std::int64_t chunk_numel() const { return chunk_; }

  // Sums the reduced parameters' gradients over the group, this replica receiving its
  // chunk (in `wire` dtype when given: cast there and back); level 2 frees the gradients.
  void reduce(Transport& comm, std::optional<torch::Dtype> wire, const std::string& what);
  // After reduce(): per parameter, the summed gradient of its owned range (flat), or the
  // parameter's own gradient when it is not reduced here; AdamW::step's `grads`.
  std::vector<torch::Tensor> step_grads() const;
  // Sum of squares of the owned chunk's gradients, of the parameters whose `count` is
  // true: float64, on the device (squared_norm).
  torch::Tensor owned_squared_norm(const std::vector<bool>& count) const;
  // After the step: every replica's updated chunk, gathered into the parameters.
  void gather_params(Transport& comm, const std::string& what);
  // The optimizer's state with every parameter's moments whole (a collective over the
  // group, in the order of AdamW::state()).
  std::vector<std::pair<std::string, torch::Tensor>> gather_state(Transport& comm, const AdamW& optimizer,
                                                                  const std::string& what) const;

 private:
  // Calls fn(parameter i, its first element, the first element relative to a, count) for
  // every reduced parameter's part of the flat vector's [a, b).
  template <class Fn>
  void for_each_piece(std::int64_t a, std::int64_t b, Fn fn) const;
  // Every replica's chunk of `from`, gathered bucket by bucket into `to` (per parameter:
  // `from` flat over its whole or over its owned range, `to` whole; a parameter that is
  // not reduced is left as it is).
  void gather(Transport& comm, const std::vector<torch::Tensor>& from, const std::vector<torch::Tensor>& to,
              const std::string& what) const;

  int level_, dp_, dp_rank_;
  std::vector<torch::Tensor> params_;
  std::vector<bool> reduced_;
  std::vector<std::int64_t> offset_;  // each reduced parameter's first element in the flat vector
  std::vector<AdamW::Range> owned_;
  std::int64_t numel_ = 0, chunk_ = 0;
  // The reduction and the gather go bucket by bucket, kBuckets per chunk, so that their
  // buffers hold about 1/kBuckets of the stage's parameters at a time: the peak stays
  // that of the backward's activations (the planner's figure).
  static constexpr std::int64_t kBuckets = 8;
  std::int64_t bucket_ = 1;
  torch::Tensor grad_chunk_;  // the summed gradients of the owned chunk (after reduce)
};

}  // namespace harp::runtime
