// Sharded optimizer state (see zero.h).
#include "harp/runtime/exec/zero.h"

#include <algorithm>

#include "harp/common/check.h"

namespace harp::runtime {

ZeroShards::ZeroShards(int level, int dp, int dp_rank, const std::vector<torch::Tensor>& params,
                       std::vector<bool> reduced)
    : level_(level), dp_(dp), dp_rank_(dp_rank), params_(params), reduced_(std::move(reduced)) {
  HARP_CHECK(level == 1 || level == 2) << level;
  HARP_CHECK(dp >= 2 && dp_rank >= 0 && dp_rank < dp);
  HARP_CHECK_EQ(params_.size(), reduced_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    HARP_CHECK(params_[i].is_contiguous());
    offset_.push_back(numel_);
    if (reduced_[i]) numel_ += params_[i].numel();
  }
  chunk_ = (numel_ + dp - 1) / dp;
  const std::int64_t lo = dp_rank * chunk_, hi = lo + chunk_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::int64_t n = params_[i].numel();
    if (!reduced_[i]) {
      owned_.push_back(AdamW::Range{0, n});
      continue;
    }
    const std::int64_t begin = std::clamp(lo - offset_[i], std::int64_t{0}, n);
    const std::int64_t end = std::clamp(hi - offset_[i], begin, n);
    owned_.push_back(AdamW::Range{begin, end});
  }
}

void ZeroShards::reduce(Transport& comm, std::optional<torch::Dtype> wire, const std::string& what) {
  if (numel_ == 0) return;
  std::vector<torch::Tensor> pieces;
  for (size_t i = 0; i < params_.size(); ++i)
    if (reduced_[i]) {
      HARP_CHECK(params_[i].grad().defined()) << "parameter " << i << " has no gradient to reduce";
      pieces.push_back(params_[i].grad().reshape({-1}));
    }
  const torch::Dtype dtype = params_.front().scalar_type();
  const std::int64_t pad = chunk_ * dp_ - numel_;
  if (pad > 0) pieces.push_back(torch::zeros({pad}, params_.front().options()));
  torch::Tensor flat = torch::cat(pieces);
  pieces.clear();
  if (level_ == 2)  // the flat copy is what is reduced: the gradients can go now
    for (size_t i = 0; i < params_.size(); ++i)
      if (reduced_[i]) params_[i].mutable_grad() = torch::Tensor();
  if (wire && *wire != dtype) flat = flat.to(*wire);  // summed in the wire dtype
  torch::Tensor chunk = torch::empty({chunk_}, flat.options());
  comm.reduce_scatter_dp(flat, chunk, what);
  flat = torch::Tensor();
  grad_chunk_ = chunk.scalar_type() == dtype ? chunk : chunk.to(dtype);
}

std::vector<torch::Tensor> ZeroShards::step_grads() const {
  std::vector<torch::Tensor> out;
  const std::int64_t lo = dp_rank_ * chunk_;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!reduced_[i]) {
      out.push_back(params_[i].grad());
      continue;
    }
    const AdamW::Range r = owned_[i];
    out.push_back(r.end > r.begin ? grad_chunk_.slice(0, offset_[i] + r.begin - lo, offset_[i] + r.end - lo)
                                  : torch::Tensor());
  }
  return out;
}

double ZeroShards::owned_squared_norm(const std::vector<bool>& count) const {
  HARP_CHECK_EQ(count.size(), params_.size());
  const std::vector<torch::Tensor> grads = step_grads();
  double sum = 0;
  for (size_t i = 0; i < grads.size(); ++i)
    if (count[i] && grads[i].defined()) sum += grads[i].to(torch::kFloat64).pow(2).sum().item<double>();
  return sum;
}

torch::Tensor ZeroShards::owned_chunk(const std::vector<torch::Tensor>& per_param) const {
  torch::Tensor chunk = torch::zeros({chunk_}, per_param.front().options());
  const std::int64_t lo = dp_rank_ * chunk_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const AdamW::Range r = owned_[i];
    if (!reduced_[i] || r.end == r.begin) continue;
    torch::Tensor mine = per_param[i].reshape({-1});
    if (mine.numel() == params_[i].numel()) mine = mine.slice(0, r.begin, r.end);  // a whole tensor: take the range
    chunk.slice(0, offset_[i] + r.begin - lo, offset_[i] + r.end - lo).copy_(mine);
  }
  return chunk;
}

void ZeroShards::gather_params(Transport& comm, const std::string& what) {
  if (numel_ == 0) return;
  torch::NoGradGuard no_grad;
  torch::Tensor chunk = owned_chunk(params_);
  torch::Tensor flat = torch::empty({chunk_ * dp_}, chunk.options());
  comm.all_gather_dp(chunk, flat, what);
  for (size_t i = 0; i < params_.size(); ++i)
    if (reduced_[i]) params_[i].view({-1}).copy_(flat.slice(0, offset_[i], offset_[i] + params_[i].numel()));
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroShards::gather_state(Transport& comm, const AdamW& optimizer,
                                                                            const std::string& what) const {
  std::vector<std::pair<std::string, torch::Tensor>> state = optimizer.state();
  HARP_CHECK_EQ(state.size(), 2 * params_.size());
  if (numel_ == 0) return state;
  for (int moment = 0; moment < 2; ++moment) {
    std::vector<torch::Tensor> mine;
    for (size_t i = 0; i < params_.size(); ++i) mine.push_back(state[2 * i + moment].second);
    torch::Tensor chunk = owned_chunk(mine);
    torch::Tensor flat = torch::empty({chunk_ * dp_}, chunk.options());
    comm.all_gather_dp(chunk, flat, what);
    for (size_t i = 0; i < params_.size(); ++i)
      if (reduced_[i])
        state[2 * i + moment].second =
            flat.slice(0, offset_[i], offset_[i] + params_[i].numel()).view(params_[i].sizes()).clone();
  }
  return state;
}

}  // namespace harp::runtime
