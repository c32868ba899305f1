// The zero-bubble list scheduler (zero_bubble.h): stages decide in the order of the time
// they are free, so every input that can arrive before a stage's decision is already
// known when it decides.
#include "harp/schedule/zero_bubble.h"

#include <cmath>
#include <limits>
#include <string>

#include "harp/schedule/generators.h"

namespace harp::schedule {
namespace {

constexpr double kUnknown = -1;
constexpr double kNever = std::numeric_limits<double>::infinity();

Status check_times(int S, const SplitTimes& t) {
  const std::pair<const char*, const std::vector<double>*> fields[] = {
      {"f", &t.f},         {"i", &t.i},
      {"w", &t.w},         {"link", &t.link},
      {"activation", &t.activation}, {"pending_w", &t.pending_w},
      {"hold_limit", &t.hold_limit}};
  for (const auto& [name, v] : fields) {
    const bool memory = v == &t.activation || v == &t.pending_w || v == &t.hold_limit;
    if (memory && t.hold_limit.empty() && v->empty()) continue;  // counts
    if (static_cast<int>(v->size()) != S)
      return invalid_argument(std::string("zero-bubble times: ") + name + " has " + std::to_string(v->size()) +
                              " values for " + std::to_string(S) + " stages; give one per stage");
    for (double x : *v)
      if (!std::isfinite(x) || x < 0)
        return invalid_argument(std::string("zero-bubble times: ") + name + " holds " + std::to_string(x) +
                                "; times must be finite and >= 0");
  }
  return Status::ok_status();
}

class ListScheduler {
 public:
  ListScheduler(int S, int M, const std::vector<int>& n, const SplitTimes& t, WPolicy policy)
      : S_(S), M_(M), n_(n), t_(t), policy_(policy), st_(S), f_end_(S, std::vector<double>(M, kUnknown)),
        i_end_(f_end_) {
    out_.compute.num_stages = S;
    out_.compute.num_microbatches = M;
    out_.compute.actions.resize(S);
  }

  ZeroBubbleResult run() {
    for (;;) {
      int best = -1;
      double best_t = kNever;
      for (int r = 0; r < S_; ++r) {
        if (finished(r)) continue;
        const double d = decision_time(r);
        if (d < best_t) best = r, best_t = d;
      }
      if (best < 0) break;  // all finished (a consistent order cannot block forever)
      decide(best, best_t);
    }
    for (const State& s : st_) out_.makespan = std::max(out_.makespan, s.free);
    return std::move(out_);
  }

 private:
  struct State {
    int f = 0, i = 0, w = 0;  // next F, I and W microbatch
    double free = 0;          // when the stage is free
  };

  bool finished(int r) const { return st_[r].w == M_; }
  // When the input of the stage's next F / I is there; kUnknown before its producer ran.
  double f_ready(int r) const {
    const State& s = st_[r];
    if (s.f >= M_) return kNever;
    if (r == 0) return 0;
    const double e = f_end_[r - 1][s.f];
    return e < 0 ? kUnknown : e + t_.link[r - 1];
  }
  double i_ready(int r) const {
    const State& s = st_[r];
    if (s.i >= s.f) return kNever;  // its forward has not run yet
    if (r == S_ - 1) return 0;
    const double e = i_end_[r + 1][s.i];
    return e < 0 ? kUnknown : e + t_.link[r];
  }
  // Rule 2's bounds: forwards awaiting their I, and what the stage would hold.
  bool memory_allows_f(int r) const {
    const State& s = st_[r];
    return s.f - s.i < n_[r] && fits(r, s.f - s.i + 1, s.i - s.w);
  }
  bool fits(int r, int awaiting_i, int pending_w) const {
    if (t_.hold_limit.empty()) return awaiting_i + pending_w <= n_.front();
    const double held = awaiting_i * t_.activation[r] + pending_w * t_.pending_w[r];
    return held <= t_.hold_limit[r] * (1 + 1e-12);
  }
  // The earliest time the stage can start something; kNever while it waits on an input
  // nobody has produced yet.
  double decision_time(int r) const {
    const State& s = st_[r];
    if (s.w < s.i) return s.free;  // a pending W can always run
    double t = kNever;
    const double ir = i_ready(r);
    if (ir >= 0) t = std::min(t, ir);
    if (memory_allows_f(r)) {
      const double fr = f_ready(r);
      if (fr >= 0) t = std::min(t, fr);
    }
    return t == kNever ? kNever : std::max(t, s.free);
  }

  void run_action(int r, ActionKind kind, int m, double start, double dur) {
    out_.compute.actions[r].push_back({r, kind, m});
    st_[r].free = start + dur;
    if (kind == ActionKind::kF) f_end_[r][m] = start + dur;
    if (kind == ActionKind::kI) i_end_[r][m] = start + dur;
  }

  void decide(int r, double now) {
    State& s = st_[r];
    const double ir = i_ready(r);
    if (ir >= 0 && ir <= now) return run_action(r, ActionKind::kI, s.i++, now, t_.i[r]);
    const double fr = memory_allows_f(r) ? f_ready(r) : kNever;
    if (fr >= 0 && fr <= now) return run_action(r, ActionKind::kF, s.f++, now, t_.f[r]);
    if (s.w < s.i) {
      // The next known arrival: a W that would overrun it waits under kFillFitting,
      // unless memory holds the next F back (then the W has to run before it anyway).
      double next = kNever;
      if (ir > now) next = std::min(next, ir);
      if (fr > now) next = std::min(next, fr);
      const bool forced = s.f < M_ && s.f - s.i < n_[r] && !memory_allows_f(r);  // only a W frees the F
      if (policy_ != WPolicy::kFillFitting || forced || next == kNever || now + t_.w[r] <= next)
        return run_action(r, ActionKind::kW, s.w++, now, t_.w[r]);
      s.free = next;  // wait for that arrival
      return;
    }
    HARP_CHECK(false) << "stage " << r << " decided at " << now << " with nothing to run";
  }

  const int S_, M_;
  const std::vector<int>& n_;
  const SplitTimes& t_;
  const WPolicy policy_;
  std::vector<State> st_;
  std::vector<std::vector<double>> f_end_, i_end_;
  ZeroBubbleResult out_;
};

}  // namespace

std::vector<int> zero_bubble_caps(const std::vector<int>& launch_counts) {
  return std::vector<int>(launch_counts.size(), launch_counts.empty() ? 0 : launch_counts.front());
}

SplitTimes unit_split_times(int num_stages) {
  const std::vector<double> ones(std::max(num_stages, 0), 1.0), zeros(std::max(num_stages, 0), 0.0);
  return {ones, ones, ones, zeros, {}, {}, {}};
}

SplitTimes plan_split_times(const plan::Plan& plan, const std::vector<int>& launch_counts) {
  SplitTimes t;
  double peak = 0;
  bool bytes = !plan.stages.empty() && launch_counts.size() == plan.stages.size();
  for (size_t k = 0; k < plan.stages.size(); ++k) {
    const plan::Stage& s = plan.stages[k];
    const double w = std::min(s.bwd_weight_s, s.bwd_s);
    t.f.push_back(s.fwd_s);
    t.i.push_back(s.bwd_s - w);
    t.w.push_back(w);
    t.link.push_back(s.comm_s);
    bytes = bytes && s.activation_bytes > 0;
    if (bytes) peak = std::max(peak, s.memory_static_bytes + launch_counts[k] * s.activation_bytes);
  }
  if (!bytes) return t;
  for (size_t k = 0; k < plan.stages.size(); ++k) {
    const plan::Stage& s = plan.stages[k];
    t.activation.push_back(s.activation_bytes);
    t.pending_w.push_back(s.weight_grad_bytes);
    double limit = peak - s.memory_static_bytes;
    if (s.usable_memory_bytes > 0) limit = std::min(limit, s.usable_memory_bytes - s.memory_static_bytes);
    t.hold_limit.push_back(std::max(limit, launch_counts[k] * s.activation_bytes));
  }
  return t;
}

std::vector<int> memory_lags(const std::vector<int>& launch_counts, const SplitTimes& times, int microbatches) {
  if (times.hold_limit.empty()) return zero_bubble_lags(launch_counts);
  std::vector<int> lags(launch_counts.size());
  for (size_t r = 0; r < lags.size(); ++r) {
    const double room = times.hold_limit[r] * (1 + 1e-12) - launch_counts[r] * times.activation[r];
    const double fit = times.pending_w[r] > 0 ? std::floor(std::max(room, 0.0) / times.pending_w[r]) : microbatches;
    lags[r] = static_cast<int>(std::min<double>(fit, microbatches));
  }
  return lags;
}

StatusOr<ZeroBubbleResult> generate_zero_bubble(int num_stages, int microbatches,
                                                const std::vector<int>& launch_counts, const SplitTimes& times,
                                                WPolicy policy) {
  // The launch counts' checks are the 1F1B generator's (one message for both).
  HARP_RETURN_IF_ERROR(generate_with_launch_counts(num_stages, microbatches, launch_counts).status());
  HARP_RETURN_IF_ERROR(check_times(num_stages, times));
  return ListScheduler(num_stages, microbatches, launch_counts, times, policy).run();
}

std::vector<int> zero_bubble_lags(const std::vector<int>& launch_counts) {
  const std::vector<int> caps = zero_bubble_caps(launch_counts);
  std::vector<int> lags(launch_counts.size());
  for (size_t i = 0; i < lags.size(); ++i) lags[i] = caps[i] - launch_counts[i];
  return lags;
}

StatusOr<Schedule> generate_fixed_lag(int num_stages, int microbatches, const std::vector<int>& launch_counts,
                                      const std::vector<int>& lags) {
  HARP_ASSIGN_OR_RETURN(Schedule s, generate_with_launch_counts(num_stages, microbatches, launch_counts));
  if (static_cast<int>(lags.size()) != num_stages)
    return invalid_argument("zero-bubble lags: got " + std::to_string(lags.size()) + " values for " +
                            std::to_string(num_stages) + " stages; give one per stage");
  for (int r = 0; r < num_stages; ++r) {
    if (lags[r] < 0 || lags[r] > microbatches)
      return invalid_argument("zero-bubble lag of stage " + std::to_string(r) + " is " + std::to_string(lags[r]) +
                              "; it must lie in [0, " + std::to_string(microbatches) + "]");
    // 1F1B's order with each B an I, and W(k − lag) right after I(k).
    std::vector<Action> out;
    int w = 0;
    for (const Action& a : s.actions[r]) {
      if (a.kind == ActionKind::kF) {
        out.push_back(a);
        continue;
      }
      out.push_back({r, ActionKind::kI, a.microbatch});
      if (a.microbatch - lags[r] >= 0) out.push_back({r, ActionKind::kW, w++});
    }
    while (w < microbatches) out.push_back({r, ActionKind::kW, w++});
    s.actions[r] = std::move(out);
  }
  return s;
}

StatusOr<double> compute_makespan(const Schedule& compute, const SplitTimes& times) {
  const int S = compute.num_stages, M = compute.num_microbatches;
  if (static_cast<int>(compute.actions.size()) != S || S < 1 || M < 1)
    return invalid_argument("makespan: the schedule's shape is inconsistent");
  HARP_RETURN_IF_ERROR(check_times(S, times));
  std::vector<std::vector<double>> f_end(S, std::vector<double>(M, kUnknown)), b_end = f_end;
  std::vector<size_t> next(S, 0);
  std::vector<double> free(S, 0);
  // As the compute grid places actions (grid.cc), with durations and link times: a start
  // depends only on finish times already fixed, so sweeping until nothing moves is exact.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < S; ++r) {
      for (; next[r] < compute.actions[r].size(); ++next[r]) {
        const Action& a = compute.actions[r][next[r]];
        const int m = a.microbatch;
        double start = free[r], dur = 0;
        if (a.kind == ActionKind::kF) {
          if (r > 0 && f_end[r - 1][m] < 0) break;
          if (r > 0) start = std::max(start, f_end[r - 1][m] + times.link[r - 1]);
          dur = times.f[r];
        } else if (a.kind == ActionKind::kW) {
          if (b_end[r][m] < 0) break;
          dur = times.w[r];
        } else {
          if (f_end[r][m] < 0 || (r < S - 1 && b_end[r + 1][m] < 0)) break;
          if (r < S - 1) start = std::max(start, b_end[r + 1][m] + times.link[r]);
          dur = times.i[r] + (a.kind == ActionKind::kB ? times.w[r] : 0);
        }
        free[r] = start + dur;
        if (a.kind == ActionKind::kF) f_end[r][m] = free[r];
        if (a.is_input_backward()) b_end[r][m] = free[r];
        progress = true;
      }
    }
  }
  double makespan = 0;
  for (int r = 0; r < S; ++r) {
    if (next[r] < compute.actions[r].size())
      return invalid_argument("makespan: rank " + std::to_string(r) + " cannot run " +
                              to_string(compute.actions[r][next[r]]) + " (its input is never produced)");
    makespan = std::max(makespan, free[r]);
  }
  return makespan;
}

double peak_held_bytes(const std::vector<Action>& list, double activation, double pending_w) {
  int inflight = 0, pending = 0;
  double peak = 0;
  for (const Action& a : list) {
    if (a.kind == ActionKind::kF) ++inflight;
    if (a.is_input_backward()) --inflight;
    if (a.kind == ActionKind::kI) ++pending;
    if (a.kind == ActionKind::kW) --pending;
    peak = std::max(peak, inflight * activation + pending * pending_w);
  }
  return peak;
}

StatusOr<ZeroBubbleResult> generate_best_zero_bubble(int num_stages, int microbatches,
                                                     const std::vector<int>& launch_counts,
                                                     const SplitTimes& times) {
  std::vector<ZeroBubbleResult> candidates;
  for (WPolicy p : {WPolicy::kFillGaps, WPolicy::kFillFitting}) {
    HARP_ASSIGN_OR_RETURN(ZeroBubbleResult r, generate_zero_bubble(num_stages, microbatches, launch_counts, times, p));
    candidates.push_back(std::move(r));
  }
  for (const std::vector<int>& lags :
       {memory_lags(launch_counts, times, microbatches), std::vector<int>(static_cast<size_t>(num_stages), 0)}) {
    ZeroBubbleResult r;
    HARP_ASSIGN_OR_RETURN(r.compute, generate_fixed_lag(num_stages, microbatches, launch_counts, lags));
    HARP_ASSIGN_OR_RETURN(r.makespan, compute_makespan(r.compute, times));
    candidates.push_back(std::move(r));
  }
  size_t best = 0;
  for (size_t k = 1; k < candidates.size(); ++k)
    if (candidates[k].makespan < candidates[best].makespan) best = k;
  return std::move(candidates[best]);
}

}  // namespace harp::schedule
