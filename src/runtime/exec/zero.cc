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
  bucket_ = std::max<std::int64_t>(1, (chunk_ + kBuckets - 1) / kBuckets);
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

template <class Fn>
void ZeroShards::for_each_piece(std::int64_t a, std::int64_t b, Fn fn) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!reduced_[i]) continue;
    const std::int64_t lo = std::max(a, offset_[i]), hi = std::min(b, offset_[i] + params_[i].numel());
    if (lo < hi) fn(i, lo - offset_[i], lo - a, hi - lo);
  }
}

void ZeroShards::reduce(Transport& comm, std::optional<torch::Dtype> wire, const std::string& what) {
  if (numel_ == 0) return;
  for (size_t i = 0; i < params_.size(); ++i)
    HARP_CHECK(!reduced_[i] || params_[i].grad().defined()) << "parameter " << i << " has no gradient to reduce";
  const torch::Dtype dtype = params_.front().scalar_type();
  grad_chunk_ = torch::empty({chunk_}, params_.front().options());
  // Bucket by bucket: replica d's part of a bucket is [d c + b0, d c + b1) of the flat
  // vector; the padding beyond it stays zero.
  for (std::int64_t b0 = 0; b0 < chunk_; b0 += bucket_) {
    const std::int64_t len = std::min(bucket_, chunk_ - b0);
    torch::Tensor flat = torch::zeros({dp_ * len}, params_.front().options());
    for (int d = 0; d < dp_; ++d)
      for_each_piece(d * chunk_ + b0, d * chunk_ + b0 + len, [&](size_t i, std::int64_t p0, std::int64_t f0, std::int64_t n) {
        flat.slice(0, d * len + f0, d * len + f0 + n).copy_(params_[i].grad().view({-1}).slice(0, p0, p0 + n));
      });
    if (wire && *wire != dtype) flat = flat.to(*wire);  // summed in the wire dtype
    torch::Tensor piece = torch::empty({len}, flat.options());
    comm.reduce_scatter_dp(flat, piece, what);
    grad_chunk_.slice(0, b0, b0 + len).copy_(piece);
  }
  if (level_ == 2)  // summed into the chunks: the gradients can go
    for (size_t i = 0; i < params_.size(); ++i)
      if (reduced_[i]) params_[i].mutable_grad() = torch::Tensor();
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

torch::Tensor ZeroShards::owned_squared_norm(const std::vector<bool>& count) const {
  HARP_CHECK_EQ(count.size(), params_.size());
  const std::vector<torch::Tensor> grads = step_grads();
  std::vector<torch::Tensor> counted;
  for (size_t i = 0; i < grads.size(); ++i)
    if (count[i]) counted.push_back(grads[i]);
  return squared_norm(counted, params_.empty() ? torch::Device(torch::kCPU) : params_.front().device());
}

void ZeroShards::gather(Transport& comm, const std::vector<torch::Tensor>& from, const std::vector<torch::Tensor>& to,
                        const std::string& what) const {
  torch::NoGradGuard no_grad;
  // Where `from`'s flat elements start: a whole tensor at the parameter's first, an owned
  // range at its range's.
  auto source = [&](size_t i, std::int64_t p0, std::int64_t n) {
    const torch::Tensor flat = from[i].reshape({-1});
    const std::int64_t first = flat.numel() == params_[i].numel() ? 0 : owned_[i].begin;
    return flat.slice(0, p0 - first, p0 - first + n);
  };
  for (std::int64_t b0 = 0; b0 < chunk_; b0 += bucket_) {
    const std::int64_t len = std::min(bucket_, chunk_ - b0);
    torch::Tensor mine = torch::zeros({len}, to.front().options());
    for_each_piece(dp_rank_ * chunk_ + b0, dp_rank_ * chunk_ + b0 + len,
                   [&](size_t i, std::int64_t p0, std::int64_t f0, std::int64_t n) {
                     mine.slice(0, f0, f0 + n).copy_(source(i, p0, n));
                   });
    torch::Tensor flat = torch::empty({dp_ * len}, mine.options());
    comm.all_gather_dp(mine, flat, what);
    for (int d = 0; d < dp_; ++d)
      for_each_piece(d * chunk_ + b0, d * chunk_ + b0 + len, [&](size_t i, std::int64_t p0, std::int64_t f0, std::int64_t n) {
        to[i].view({-1}).slice(0, p0, p0 + n).copy_(flat.slice(0, d * len + f0, d * len + f0 + n));
      });
  }
}

void ZeroShards::gather_params(Transport& comm, const std::string& what) {
  if (numel_ == 0) return;
  grad_chunk_ = torch::Tensor();  // stepped: not kept between steps
  gather(comm, params_, params_, what);
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroShards::gather_state(Transport& comm, const AdamW& optimizer,
                                                                            const std::string& what) const {
  std::vector<std::pair<std::string, torch::Tensor>> state = optimizer.state();
  HARP_CHECK_EQ(state.size(), 2 * params_.size());
  if (numel_ == 0) return state;
  for (int moment = 0; moment < 2; ++moment) {
    std::vector<torch::Tensor> mine, whole;
    for (size_t i = 0; i < params_.size(); ++i) {
      mine.push_back(state[2 * i + moment].second);
      whole.push_back(reduced_[i] ? torch::empty_like(params_[i]) : mine.back());
    }
    gather(comm, mine, whole, what);
    for (size_t i = 0; i < params_.size(); ++i) state[2 * i + moment].second = whole[i];
  }
  return state;
}

}  // namespace harp::runtime
