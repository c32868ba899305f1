// Threads that run one function on every lane at once, started once and reused
// (internal to the planner: the DP fills each layer's states on them, hundreds of
// times per run, where starting threads each time cost more than the work of a
// sparse layer).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace harp::planner {

class LanePool {
 public:
  // `lanes` >= 1: lane 0 is the calling thread; the others start on the first run().
  explicit LanePool(int lanes) : lanes_(lanes < 1 ? 1 : lanes) {}
  LanePool(const LanePool&) = delete;
  LanePool& operator=(const LanePool&) = delete;
  ~LanePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int lanes() const { return lanes_; }

  // Runs fn(t) for every lane t, lane 0 here; returns when every lane has returned.
  // fn must not throw.
  void run(const std::function<void(int)>& fn) {
    if (lanes_ == 1) {
      fn(0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (static_cast<int>(threads_.size()) < lanes_ - 1) {
        const int t = static_cast<int>(threads_.size()) + 1;
        threads_.emplace_back([this, t] { loop(t); });
      }
      fn_ = &fn;
      pending_ = lanes_ - 1;
      ++generation_;
    }
    start_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  void loop(int t) {
    long long seen = 0;
    for (;;) {
      const std::function<void(int)>* fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        fn = fn_;
      }
      (*fn)(t);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const int lanes_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  long long generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace harp::planner
