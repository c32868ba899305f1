// The Transfer wrapper and the helpers shared by every transport (see transport.h).
#include "harp/runtime/comm/transport.h"

#include "harp/common/check.h"

#include <algorithm>
#include <map>

namespace harp::runtime {

std::vector<int> tied_group_members(const RankLayout& layout) {
  std::vector<int> members = layout.stage_ranks.front();
  if (layout.num_stages() > 1)
    members.insert(members.end(), layout.stage_ranks.back().begin(), layout.stage_ranks.back().end());
  return members;
}

Transfer::Transfer(std::shared_ptr<Op> op, std::string what, int peer)
    : op_(std::move(op)), what_(std::move(what)), peer_(peer) {}

void Transfer::wait(std::chrono::milliseconds timeout) { complete(timeout, false); }

void Transfer::wait_on_stream(std::chrono::milliseconds timeout) { complete(timeout, true); }

void Transfer::complete(std::chrono::milliseconds timeout, bool on_stream) {
  if (!op_) return;
  std::shared_ptr<Op> op = std::move(op_);
  op_.reset();
  try {
    if (on_stream)
      op->wait_on_stream(timeout);
    else
      op->wait(timeout);
  } catch (const RuntimeFailure& e) {
    throw RuntimeFailure(what_ + " " + std::to_string(peer_) + ": " + e.what());
  }
}

void Transport::reduce_scatter_dp(torch::Tensor& flat, torch::Tensor& shard, const std::string& what) {
  const int dp = layout_.dp();
  HARP_CHECK_EQ(flat.numel(), dp * shard.numel());
  allreduce_dp(flat, what);
  shard.copy_(flat.view({dp, -1})[layout_.dp_rank]);
}

void Transport::all_gather_dp(torch::Tensor& shard, torch::Tensor& flat, const std::string& what) {
  const int dp = layout_.dp();
  HARP_CHECK_EQ(flat.numel(), dp * shard.numel());
  flat.zero_();
  flat.view({dp, -1})[layout_.dp_rank].copy_(shard.view({-1}));
  allreduce_dp(flat, what);
}

}  // namespace harp::runtime
