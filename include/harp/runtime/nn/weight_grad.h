// Deferred weight gradients: the runtime's half of a split backward (zero-bubble
// schedules, schedule/zero_bubble.h), the way the Zero Bubble authors split it
// (WeightGradStore): the input-gradient pass (I) runs the whole autograd graph but every
// linear layer computes only its input and bias gradients there and queues its weight
// product dW = dyᵀ x; the weight pass (W) runs the queue, adding each product to its
// weight's .grad. So I costs what the upstream stage waits for and no more, the graph is
// freed at I, and what waits for W is each product's two operands (the layer's input and
// its output gradient).
//
// A queue is per microbatch. A forward run while a DeferWeightGrads guard is alive on its
// thread ties every linear() it builds to that guard's queue (linear.h); their backward,
// whichever thread the autograd engine runs it on, queues into it. Products whose weight
// is not a leaf (a derived tensor) are computed at once, as without the guard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include <torch/torch.h>

namespace harp::runtime {

class WeightGradQueue {
 public:
  WeightGradQueue() = default;
  WeightGradQueue(const WeightGradQueue&) = delete;
  WeightGradQueue& operator=(const WeightGradQueue&) = delete;

  // Queues dW = a product computed later; `weight` is the leaf it is added to; `bytes`
  // what the product's operands hold until then.
  void push(std::function<torch::Tensor()> product, torch::Tensor weight, std::int64_t bytes);
  // Computes every queued product, adds it to its weight's .grad, and empties the queue.
  // Returns the number of products run.
  std::size_t run();
  std::size_t size() const;
  // Drops what is queued (an aborted step).
  void clear();
  // The bytes the queued operands hold (the memory a pending W keeps).
  std::int64_t held_bytes() const;

 private:
  struct Job {
    std::function<torch::Tensor()> product;
    torch::Tensor weight;
    std::int64_t bytes = 0;
  };
  mutable std::mutex mu_;
  std::vector<Job> jobs_;
};

// While alive, linear() calls on this thread defer their weight products into `queue`
// (nullptr: not deferred). Nests; restores the previous queue.
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue* queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;
  // This thread's queue now, or nullptr.
  static WeightGradQueue* current();

 private:
  WeightGradQueue* previous_;
};

}  // namespace harp::runtime
