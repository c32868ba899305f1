// The deferred weight-gradient queue (weight_grad.h).
#include "harp/runtime/nn/weight_grad.h"

namespace harp::runtime {
namespace {
thread_local WeightGradQueue* current_queue = nullptr;
}  // namespace

void WeightGradQueue::push(std::function<torch::Tensor()> product, torch::Tensor weight, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.push_back({std::move(product), std::move(weight), bytes});
}

std::int64_t WeightGradQueue::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::int64_t total = 0;
  for (const Job& j : jobs_) total += j.bytes;
  return total;
}

std::size_t WeightGradQueue::run() {
  std::vector<Job> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs.swap(jobs_);
  }
  torch::NoGradGuard no_grad;
  for (Job& j : jobs) {
    torch::Tensor dw = j.product();
    j.product = nullptr;  // its operands go as soon as the product is made
    if (dw.scalar_type() != j.weight.scalar_type()) dw = dw.to(j.weight.scalar_type());
    torch::Tensor& grad = j.weight.mutable_grad();
    if (grad.defined())
      grad.add_(dw);
    else
      grad = dw;
  }
  return jobs.size();
}

std::size_t WeightGradQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void WeightGradQueue::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.clear();
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue* queue) : previous_(current_queue) { current_queue = queue; }
DeferWeightGrads::~DeferWeightGrads() { current_queue = previous_; }
WeightGradQueue* DeferWeightGrads::current() { return current_queue; }

}  // namespace harp::runtime
