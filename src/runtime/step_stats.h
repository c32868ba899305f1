// The figures a training run reduces over every rank after each step (trainer.cc): per
// stage, the checkpoint and stop votes, every link's message ends and the link probes.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <torch/torch.h>

#include "harp/runtime/exec/executor.h"

namespace harp::runtime {

// The figures every rank adds to one all-reduce after each step: per stage (only its
// first replica writes them) the busy fraction and tensor bytes at the step's start and
// peak, and the peak its device's allocator reserved (CUDA's cache; the peak on the CPU);
// then the ranks whose
// checkpoint write is done (checkpoint_writer.h) and the ranks asked to stop; then, per
// link between consecutive stages and microbatch, when each end of its activation and
// its gradient sent and received (StepResult::sent_s); then per rank (the first of its
// tensor-parallel group writes them) its forward and backward time per microbatch, so
// that a stage's slowest replica can be told. One buffer for the whole run: the
// collective may release its reference to a fresh tensor after the next step has begun,
// which made the next step's measured base bytes depend on that timing.
class StepStats {
 public:
  StepStats(int stages, int microbatches, int probes, int ranks)
      : S_(stages), M_(microbatches), P_(probes),
        t_(torch::zeros({kPerStage * stages + 2 + 4 * std::max(0, stages - 1) * microbatches + probes + 2 * ranks},
                        torch::kFloat64)) {}
  void clear() { t_.zero_(); }
  void set_busy(int stage, double busy) { t_[stage] = busy; }
  void set_replica(int rank, double fwd_s, double bwd_s) {
    t_[probe_index(P_) + 2 * rank] = fwd_s;
    t_[probe_index(P_) + 2 * rank + 1] = bwd_s;
  }
  void set_memory(int stage, double base_bytes, double peak_bytes, double reserved_bytes) {
    t_[S_ + stage] = base_bytes;
    t_[2 * S_ + stage] = peak_bytes;
    t_[3 * S_ + stage] = reserved_bytes;
  }
  void set_votes(double checkpoint_done, double stop) {
    t_[kPerStage * S_] = checkpoint_done;
    t_[kPerStage * S_ + 1] = stop;
  }
  // Stage `stage`'s ends of its links: it sends activations on link `stage` and gradients
  // on link `stage - 1`, and receives the other two.
  void set_link_ends(int stage, const StepResult& r) {
    auto put = [&](int link, int slot, const std::vector<double>& v) {
      if (link < 0 || link >= S_ - 1) return;
      for (int m = 0; m < M_ && m < static_cast<int>(v.size()); ++m)
        if (v[static_cast<size_t>(m)] > 0) t_[index(link, m, slot)] = v[static_cast<size_t>(m)];
    };
    put(stage, 0, r.sent_s[0]);
    put(stage - 1, 1, r.arrived_s[0]);
    put(stage - 1, 2, r.sent_s[1]);
    put(stage, 3, r.arrived_s[1]);
  }
  // Link probe k's transit (its initiator writes it; LinkProbe).
  void set_probe(int k, double transit_s) { t_[probe_index(k)] = transit_s; }
  double probe(int k) const { return t_[probe_index(k)].item<double>(); }
  torch::Tensor& tensor() { return t_; }
  std::vector<double> busy() const {
    torch::Tensor b = t_.slice(0, 0, S_).contiguous();
    return {b.data_ptr<double>(), b.data_ptr<double>() + S_};
  }
  torch::Tensor replica_compute() const { return t_.slice(0, probe_index(P_)); }  // per rank: forward, backward
  // Rank `rank`'s forward + backward per microbatch.
  double compute_s(int rank) const {
    return t_[probe_index(P_) + 2 * rank].item<double>() + t_[probe_index(P_) + 2 * rank + 1].item<double>();
  }
  double base_bytes(int stage) const { return t_[S_ + stage].item<double>(); }
  double peak_bytes(int stage) const { return t_[2 * S_ + stage].item<double>(); }
  double reserved_bytes(int stage) const { return t_[3 * S_ + stage].item<double>(); }
  double checkpoint_votes() const { return t_[kPerStage * S_].item<double>(); }
  bool stop_voted() const { return t_[kPerStage * S_ + 1].item<double>() > 0; }
  // Per link, the transit of one message (drift.h): each direction's fastest microbatch
  // (arrived - sent: the two ends' clocks differ by an offset, the same for every
  // microbatch of the step), averaged over the two directions, which cancels the offset.
  // The fastest is one whose receiver was already waiting (the first activation of a step
  // and the last gradient are), so it is the message's time on the link; 0 where an end
  // is missing.
  std::vector<double> link_transit() const {
    std::vector<double> out(static_cast<size_t>(std::max(0, S_ - 1)), 0.0);
    if (out.empty() || M_ == 0) return out;
    const double* v = t_.data_ptr<double>();  // CPU, contiguous
    for (int l = 0; l + 1 < S_; ++l) {
      double fastest[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
      for (int m = 0; m < M_; ++m)
        for (int d = 0; d < 2; ++d) {
          const double sent = v[index(l, m, 2 * d)], arrived = v[index(l, m, 2 * d + 1)];
          if (sent > 0 && arrived > 0) fastest[d] = std::min(fastest[d], arrived - sent);
        }
      if (std::isfinite(fastest[0]) && std::isfinite(fastest[1]))
        out[static_cast<size_t>(l)] = std::max(0.0, (fastest[0] + fastest[1]) / 2);
    }
    return out;
  }

 private:
  static constexpr int kPerStage = 4;
  // slot: 0 activation sent, 1 activation arrived, 2 gradient sent, 3 gradient arrived.
  int index(int link, int mb, int slot) const { return kPerStage * S_ + 2 + (link * M_ + mb) * 4 + slot; }
  int probe_index(int k) const { return kPerStage * S_ + 2 + 4 * std::max(0, S_ - 1) * M_ + k; }
  int S_, M_, P_;
  torch::Tensor t_;
};

}  // namespace harp::runtime
