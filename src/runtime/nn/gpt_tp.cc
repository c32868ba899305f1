// Tensor parallelism in the GPT and LLaMA layers (gpt.h): Megatron's f and g as autograd
// functions, the column- and row-parallel projections, the vocabulary-parallel loss, the
// sharded cut tensors, and where a parameter's shard lies in its full tensor.
#include "harp/runtime/nn/gpt.h"

#include <algorithm>

#include "gpt_pieces.h"
#include "harp/runtime/nn/linear.h"

namespace harp::runtime {
namespace {

const TensorParallel& tp_at(torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<const TensorParallel*>(ctx->saved_data["tp"].toInt());
}

// Sums `x` over the tp group. On CUDA in x's own dtype, as Megatron does (NCCL sums bf16:
// half the bytes of a float32 wire); on the CPU a bf16 partial product is summed in
// float32 and rounded once (Gloo has no bf16 sum).
torch::Tensor summed(const TensorParallel& tp, const torch::Tensor& x) {
  torch::Tensor y = low_precision(x) && !x.is_cuda() ? x.to(torch::kFloat) : x.contiguous().clone();
  tp.allreduce(y);
  return y.to(x.scalar_type());
}

// Megatron's f: identity forward, the gradient summed over the tp group backward. The
// group travels as its address: AutogradContext keeps IValues only, and the layer that
// owns the group outlives every graph it builds.
struct CopyToTp : public torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return {summed(tp_at(ctx), grad[0]), torch::Tensor()};
  }
};

// Megatron's g: the sum over the tp group forward, identity backward.
struct ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::int64_t tp) {
    (void)ctx;
    return summed(*reinterpret_cast<const TensorParallel*>(tp), x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    (void)ctx;
    return {grad[0], torch::Tensor()};
  }
};

std::int64_t address(const std::shared_ptr<const TensorParallel>& tp) { return reinterpret_cast<std::int64_t>(tp.get()); }

}  // namespace

std::pair<std::int64_t, std::int64_t> vocab_rows(std::int64_t vocab, int size, int rank) {
  const std::int64_t per = (vocab + size - 1) / size;
  const std::int64_t begin = std::min(vocab, rank * per);
  return {begin, std::min(vocab, begin + per)};
}

torch::Tensor Shard::take(const torch::Tensor& full) const {
  if (!split()) return full;
  std::vector<torch::Tensor> parts;
  for (const auto& [offset, length] : slices) parts.push_back(full.narrow(dim, offset, length));
  return parts.size() == 1 ? parts[0] : torch::cat(parts, dim);
}

void Shard::add_to(const torch::Tensor& local, torch::Tensor& full) const {
  if (!split()) {
    full.add_(local);
    return;
  }
  std::int64_t at = 0;
  for (const auto& [offset, length] : slices) {
    full.narrow(dim, offset, length).add_(local.narrow(dim, at, length));
    at += length;
  }
}

torch::Tensor GptLayerImpl::tp_sum(const torch::Tensor& x) const { return ReduceFromTp::apply(x, address(tp_)); }

torch::Tensor GptLayerImpl::column_input(const torch::Tensor& x) const {
  return tp_ ? CopyToTp::apply(x, address(tp_)) : x;
}

torch::Tensor GptLayerImpl::row_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const {
  if (!tp_) return runtime::linear(x, w, b);
  torch::Tensor y = tp_sum(runtime::linear(x, w));
  return b.defined() ? y + b : y;
}

torch::Tensor GptLayerImpl::vocab_parallel_loss(const torch::Tensor& logits, const torch::Tensor& targets) const {
  torch::Tensor z = logits.reshape({-1, logits.size(-1)});
  if (low_precision(z)) z = z.to(torch::kFloat);
  const torch::Tensor target = targets.reshape({-1});
  const std::int64_t n = z.size(0), size = tp_->size;
  // One all-reduce gathers each rank's largest logit per token (row r: rank r's, zeros
  // elsewhere) and sums the target logit (its rank picks it, the others give 0); a
  // second sums exp(z - max). loss = log(sum) + max - target logit, per token; the max
  // is a constant shift (its gradient terms cancel), so it is taken without a graph.
  const torch::Tensor mine = (target >= vocab_begin_) & (target < vocab_end_);
  const torch::Tensor index = (target - vocab_begin_).clamp(0, vocab_end_ - vocab_begin_ - 1).unsqueeze(1);
  const torch::Tensor picked = z.gather(1, index).squeeze(1).masked_fill(mine.logical_not(), 0.0);
  torch::Tensor maxima = torch::zeros({size, n}, z.options());
  maxima[tp_->rank].copy_(std::get<0>(z.detach().max(-1)));
  const torch::Tensor both = tp_sum(torch::cat({maxima, picked.unsqueeze(0)}, 0));
  const torch::Tensor shift = std::get<0>(both.narrow(0, 0, size).detach().max(0));
  const torch::Tensor target_logit = both[size];
  const torch::Tensor sum_exp = tp_sum((z - shift.unsqueeze(1)).exp().sum(-1));
  return (sum_exp.log() + shift - target_logit).sum();
}

std::vector<std::int64_t> GptLayerImpl::sharded_widths(bool input) const {
  if (!tp_ || layer_.kind != model::LayerKind::kBlockPart) return {};
  // The piece whose output crosses the cut: the layer's last (output) or the one before
  // its first (input: attn_out reads attn_in's output, mlp_out mlp_in's).
  const int last = input ? (layer_.pieces & -layer_.pieces) >> 1 : 1 << (31 - __builtin_clz(layer_.pieces));
  const bool llama = config_.family == "llama";
  const std::int64_t h = config_.hidden, d = config_.head_size();
  const std::int64_t q = llama ? config_.heads * d : h,
                     kv = llama ? static_cast<std::int64_t>(config_.kv_heads) * d : h;
  if (last == kAttnIn) return {q, kv, kv};
  if (last == kMlpIn) return {config_.ffn_hidden};
  return {};
}

torch::Tensor GptLayerImpl::full_cut(const torch::Tensor& local) const {
  const std::vector<std::int64_t> widths = sharded_widths(false);
  if (widths.empty()) return local;
  const std::int64_t size = tp_->size, rank = tp_->rank;
  std::vector<torch::Tensor> parts;
  std::int64_t at = 0;
  for (std::int64_t w : widths) {  // this rank's columns in place, zeros elsewhere: the sum gathers
    const std::int64_t n = w / size;
    parts.push_back(torch::constant_pad_nd(local.narrow(-1, at, n), {rank * n, (size - 1 - rank) * n}));
    at += n;
  }
  torch::Tensor gathered = tp_sum(torch::cat(parts, -1));
  return torch::cat({gathered, local.narrow(-1, at, local.size(-1) - at)}, -1);
}

torch::Tensor GptLayerImpl::local_cut(const torch::Tensor& full) const {
  const std::vector<std::int64_t> widths = sharded_widths(true);
  if (widths.empty()) return full;
  const std::int64_t size = tp_->size, rank = tp_->rank;
  std::int64_t total = 0;
  for (std::int64_t w : widths) total += w;
  // f on the sharded columns: their gradient is summed over the group (each rank fills
  // its own columns); the residual is replicated and keeps its own gradient.
  torch::Tensor shared = CopyToTp::apply(full.narrow(-1, 0, total), address(tp_));
  std::vector<torch::Tensor> parts;
  std::int64_t at = 0;
  for (std::int64_t w : widths) {
    parts.push_back(shared.narrow(-1, at + rank * (w / size), w / size));
    at += w;
  }
  parts.push_back(full.narrow(-1, total, full.size(-1) - total));
  return torch::cat(parts, -1);
}

}  // namespace harp::runtime
