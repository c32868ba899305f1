// Discrete-event simulation of a lowered schedule: ranks run their lists in order, F/B
// wait for their input to arrive, sends queue FIFO on their link direction, STEP waits
// for every rank (the runtime's all-ranks reduction of the gradient norm and the loss).
// Not modelled: bandwidth sharing between concurrent transfers of one direction (they
// queue instead), compute/communication interference, dp replicas, jitter.
#include "harp/sim/simulator.h"

#include "harp/schedule/zero_bubble.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <utility>

namespace harp::sim {
namespace {

using schedule::Action;
using schedule::ActionKind;

constexpr Nanos kNotYet = -1;  // an arrival whose send has not run yet

// Min-heap on (time, insertion seq): events at the same time run in insertion order,
// which makes every run bit-identical. Owned by one Simulation (never static) and
// sized once; each rank has at most one pending event, so it never grows past S.
class EventQueue {
 public:
  struct Event {
    Nanos time_ns;
    std::uint64_t seq;
    int rank;
  };

  explicit EventQueue(std::size_t capacity) { heap_.reserve(capacity); }
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  void push(Nanos time_ns, int rank) {
    heap_.push_back({time_ns, next_seq_++, rank});
    std::push_heap(heap_.begin(), heap_.end(), Later());
  }
  Event pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    Event e = heap_.back();
    heap_.pop_back();
    return e;
  }
  bool empty() const { return heap_.empty(); }
  // True if an event at `time_ns` pushed now would be the next one popped.
  bool would_run_next(Nanos time_ns) const {
    return heap_.empty() || time_ns < heap_.front().time_ns;
  }

 private:
  struct Later {  // a functor, not a function pointer, so the heap code inlines it
    bool operator()(const Event& a, const Event& b) const {
      return a.time_ns != b.time_ns ? a.time_ns > b.time_ns : a.seq > b.seq;
    }
  };
  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
};

struct StageNanos {
  Nanos fwd = 0, bwd = 0, comm = 0, latency = 0, allreduce = 0, optimizer = 0;
  Nanos wgrad = 0;  // of bwd, a split backward's W (its I takes bwd - wgrad)
};

// Bits of the per-(rank, microbatch) "seen" mask used by the setup checks; the last two
// are kept once per rank.
enum SeenBit : std::uint16_t {
  kSeenF = 1, kSeenB = 2, kSeenSendF = 4, kSeenRecvF = 8, kSeenSendB = 16, kSeenRecvB = 32,
  kSeenReduceGrad = 64, kSeenStep = 128, kSeenI = 256, kSeenW = 512
};

std::uint16_t seen_bit(ActionKind k) {
  switch (k) {
    case ActionKind::kF: return kSeenF;
    case ActionKind::kB: return kSeenB;
    case ActionKind::kSendF: return kSeenSendF;
    case ActionKind::kRecvF: return kSeenRecvF;
    case ActionKind::kSendB: return kSeenSendB;
    case ActionKind::kRecvB: return kSeenRecvB;
    case ActionKind::kReduceGrad: return kSeenReduceGrad;
    case ActionKind::kStep: return kSeenStep;
    case ActionKind::kI: return kSeenI;
    case ActionKind::kW: return kSeenW;
  }
  return 0;
}

Status convert_stage(const plan::Stage& s, int i, StageNanos* out) {
  const std::pair<const char*, Seconds> fields[] = {
      {"fwd_s", s.fwd_s},   {"bwd_s", s.bwd_s},             {"comm_s", s.comm_s},
      {"comm_latency_s", s.comm_latency_s}, {"allreduce_s", s.allreduce_s},
      {"optimizer_s", s.optimizer_s}};
  for (const auto& [name, v] : fields) {
    if (!std::isfinite(v) || v < 0 || v > 1e9)
      return invalid_argument("plan stages[" + std::to_string(i) + "]." + name + " = " +
                              std::to_string(v) +
                              ": the simulator needs a finite time in [0, 1e9] s");
  }
  if (s.comm_latency_s > s.comm_s)
    return invalid_argument("plan stages[" + std::to_string(i) + "].comm_latency_s exceeds comm_s;"
                            " comm_s is latency plus bytes / bandwidth, make it the total");
  if (!std::isfinite(s.bwd_weight_s) || s.bwd_weight_s < 0 || s.bwd_weight_s > s.bwd_s)
    return invalid_argument("plan stages[" + std::to_string(i) + "].bwd_weight_s = " + std::to_string(s.bwd_weight_s) +
                            ": the weight-gradient part of bwd_s must lie in [0, bwd_s]");
  *out = {s_to_ns(s.fwd_s),       s_to_ns(s.bwd_s),         s_to_ns(s.comm_s),
          s_to_ns(s.comm_latency_s), s_to_ns(s.allreduce_s), s_to_ns(s.optimizer_s),
          s_to_ns(s.bwd_weight_s)};
  return Status::ok_status();
}

// Rejects lists the event loop cannot interpret, so the loop itself needs no checks:
// every action on its own rank, microbatches in range, each action at most once, a
// compute only after its RECV is posted, a SEND only after its compute. Missing
// actions are not errors here: a list that stops early simply ends early.
Status check_lists(const schedule::Schedule& s) {
  const int S = s.num_stages, M = s.num_microbatches;
  std::vector<std::uint16_t> seen(static_cast<std::size_t>(M));
  for (int r = 0; r < S; ++r) {
    std::fill(seen.begin(), seen.end(), 0);
    std::uint16_t seen_once = 0;
    const auto& list = s.actions[r];
    for (std::size_t k = 0; k < list.size(); ++k) {
      const Action& a = list[k];
      auto fail = [&](const std::string& why) {
        return invalid_argument("rank " + std::to_string(r) + ", action " + std::to_string(k) +
                                " (" + schedule::to_string(a) + "): " + why);
      };
      if (a.stage != r) return fail("belongs to another stage; one rank runs one stage here");
      const std::uint16_t bit = seen_bit(a.kind);
      if (!a.is_compute() && !a.is_send() && !a.is_recv()) {  // REDUCE_GRAD, STEP
        if (seen_once & bit) return fail("appears twice on this rank");
        seen_once |= bit;
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= M)
        return fail("microbatch outside [0, " + std::to_string(M) + ")");
      if ((a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB) && r == S - 1)
        return fail("the last stage has no next stage");
      if ((a.kind == ActionKind::kSendB || a.kind == ActionKind::kRecvF) && r == 0)
        return fail("the first stage has no previous stage");
      std::uint16_t& m = seen[a.microbatch];
      if (m & bit) return fail("appears twice on this rank");
      if ((a.kind == ActionKind::kB && (m & (kSeenI | kSeenW))) ||
          ((a.kind == ActionKind::kI || a.kind == ActionKind::kW) && (m & kSeenB)))
        return fail("a microbatch's backward is one B or one I and one W, not both");
      std::uint16_t need = 0;
      if (a.kind == ActionKind::kF && r > 0) need = kSeenRecvF;
      if (a.is_input_backward()) need = r < S - 1 ? kSeenF | kSeenRecvB : kSeenF;
      if (a.kind == ActionKind::kW) need = kSeenI;
      if (a.kind == ActionKind::kSendF) need = kSeenF;
      if (a.kind == ActionKind::kSendB) need = (m & kSeenI) ? kSeenI : kSeenB;
      const std::uint16_t missing = need & ~m;
      if (missing) {
        const ActionKind first = (missing & kSeenF)       ? ActionKind::kF
                                 : (missing & kSeenB)     ? ActionKind::kB
                                 : (missing & kSeenI)     ? ActionKind::kI
                                 : (missing & kSeenRecvF) ? ActionKind::kRecvF
                                                          : ActionKind::kRecvB;
        return fail("comes before " + schedule::to_string({r, first, a.microbatch}) +
                    " on this rank; simulate a lowered schedule (schedule::lower)");
      }
      m |= bit;
    }
  }
  return Status::ok_status();
}

class Simulation {
 public:
  Simulation(const schedule::Schedule& s, std::vector<StageNanos> times, Nanos sync_ns,
             const SimOptions& options)
      : lists_(s.actions),
        times_(std::move(times)),
        S_(s.num_stages),
        M_(s.num_microbatches),
        options_(options),
        queue_(static_cast<std::size_t>(S_)),
        ranks_(static_cast<std::size_t>(S_)),
        act_arrival_ns_(static_cast<std::size_t>(S_) * M_, kNotYet),
        grad_arrival_ns_(static_cast<std::size_t>(S_) * M_, kNotYet),
        fwd_link_free_ns_(static_cast<std::size_t>(S_), 0),
        bwd_link_free_ns_(static_cast<std::size_t>(S_), 0),
        step_reach_ns_(static_cast<std::size_t>(S_), kNotYet),
        sync_ns_(sync_ns) {
    result_.ranks.resize(static_cast<std::size_t>(S_));
    for (const auto& list : lists_)
      step_ranks_ += std::any_of(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::kStep; });
    if (options_.record_spans) result_.spans.reserve(s.total_actions());
  }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  StatusOr<SimResult> run();

 private:
  enum class Wait : std::uint8_t { kNone, kActivation, kGradient, kStep };
  struct RankState {
    std::size_t pc = 0;
    int inflight = 0, held = 0;  // F done − B/I done; F done − B/W done
    Wait wait = Wait::kNone;
    int wait_microbatch = -1;
  };

  void advance(int rank, Nanos now);
  void deliver(int rank, Wait kind, int microbatch, Nanos arrive_ns);
  void record(int rank, const Action& a, Nanos start, Nanos end, Nanos link_start = 0,
              Nanos link_end = 0, Nanos arrive = 0) {
    if (options_.record_spans)
      result_.spans.push_back({rank, a, start, end, link_start, link_end, arrive});
  }
  Status stuck_error() const;

  const std::vector<std::vector<Action>>& lists_;
  const std::vector<StageNanos> times_;
  const int S_, M_;
  const SimOptions options_;
  EventQueue queue_;
  std::vector<RankState> ranks_;
  // Indexed rank * M + microbatch: when the activation (from rank − 1) or the gradient
  // (from rank + 1) of that microbatch is on this rank; kNotYet before its SEND runs.
  std::vector<Nanos> act_arrival_ns_, grad_arrival_ns_;
  // Indexed by boundary i (between stage i and i + 1): when the direction is free.
  std::vector<Nanos> fwd_link_free_ns_, bwd_link_free_ns_;
  // The STEP barrier: ranks whose list has a STEP, how many have reached it and when
  // (kNotYet before), and when every one of them may step (kNotYet until all have).
  int step_ranks_ = 0, step_reached_ = 0;
  std::vector<Nanos> step_reach_ns_;
  Nanos step_release_ns_ = kNotYet;
  const Nanos sync_ns_;  // one all-ranks reduction of a few numbers
  SimResult result_;
};

// A SEND is issued at `now` and the sender moves on; a link direction has one sender
// only, so FIFO per direction is simply the sender's list order.
void Simulation::deliver(int rank, Wait kind, int microbatch, Nanos arrive_ns) {
  RankState& st = ranks_[rank];
  if (st.wait == kind && st.wait_microbatch == microbatch) {
    st.wait = Wait::kNone;
    queue_.push(arrive_ns, rank);
  }
}

// Runs `rank` from time `now` until it starts a timed action whose end is not the next
// event (that end is pushed), blocks on a missing input (deliver() wakes it), or
// finishes its list.
void Simulation::advance(int rank, Nanos now) {
  RankState& st = ranks_[rank];
  RankStats& stats = result_.ranks[rank];
  const std::vector<Action>& list = lists_[rank];
  const StageNanos& t = times_[rank];
  const std::size_t base = static_cast<std::size_t>(rank) * M_;
  while (st.pc < list.size()) {
    const Action& a = list[st.pc];
    const int m = a.microbatch;
    Nanos duration = 0, start = now;
    switch (a.kind) {
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:
        record(rank, a, now, now);
        ++st.pc;
        continue;
      case ActionKind::kSendF:
      case ActionKind::kSendB: {
        const bool fwd = a.kind == ActionKind::kSendF;
        const int boundary = fwd ? rank : rank - 1;
        const StageNanos& link = times_[boundary];
        Nanos& free_ns = fwd ? fwd_link_free_ns_[boundary] : bwd_link_free_ns_[boundary];
        const Nanos link_start = std::max(now, free_ns);
        free_ns = link_start + (link.comm - link.latency);
        const Nanos arrive = free_ns + link.latency;
        const int dst = fwd ? rank + 1 : rank - 1;
        const std::size_t slot = static_cast<std::size_t>(dst) * M_ + m;
        (fwd ? act_arrival_ns_ : grad_arrival_ns_)[slot] = arrive;
        deliver(dst, fwd ? Wait::kActivation : Wait::kGradient, m, arrive);
        record(rank, a, now, now, link_start, free_ns, arrive);
        ++st.pc;
        continue;
      }
      case ActionKind::kW:  // waits for nothing: its I ran earlier on this rank
        duration = t.wgrad;
        --st.held;
        stats.compute_ns += duration;
        break;
      case ActionKind::kF:
      case ActionKind::kI:
      case ActionKind::kB: {
        const bool fwd = a.kind == ActionKind::kF;
        if (fwd ? rank > 0 : rank < S_ - 1) {
          const Nanos arrive = (fwd ? act_arrival_ns_ : grad_arrival_ns_)[base + m];
          if (arrive == kNotYet) {  // woken by deliver() when the SEND runs
            st.wait = fwd ? Wait::kActivation : Wait::kGradient;
            st.wait_microbatch = m;
            return;
          }
          start = std::max(now, arrive);
        }
        duration = fwd ? t.fwd : a.kind == ActionKind::kI ? t.bwd - t.wgrad : t.bwd;
        st.inflight += fwd ? 1 : -1;
        st.held += fwd ? 1 : a.kind == ActionKind::kB ? -1 : 0;
        stats.peak_inflight = std::max(stats.peak_inflight, st.inflight);
        stats.peak_held = std::max(stats.peak_held, st.held);
        stats.compute_ns += duration;
        break;
      }
      case ActionKind::kReduceGrad:
        duration = t.allreduce;
        break;
      case ActionKind::kStep:
        if (step_release_ns_ == kNotYet) {
          // Reached: the all-ranks reduction waits for the last rank, then costs sync_ns.
          step_reach_ns_[rank] = now;
          if (++step_reached_ < step_ranks_) {
            st.wait = Wait::kStep;
            return;
          }
          step_release_ns_ = *std::max_element(step_reach_ns_.begin(), step_reach_ns_.end()) + sync_ns_;
          for (int r = 0; r < S_; ++r)
            if (r != rank && ranks_[r].wait == Wait::kStep) {
              ranks_[r].wait = Wait::kNone;
              queue_.push(step_release_ns_, r);
            }
        }
        start = step_release_ns_;
        duration = t.optimizer;
        break;
    }
    stats.busy_ns += duration;
    // STEP's span runs from reaching it, as the runtime's does (its wait included).
    record(rank, a, a.kind == ActionKind::kStep ? step_reach_ns_[rank] : start, start + duration);
    ++st.pc;
    now = start + duration;
    // Its completion would be the very next event: run on without the heap round trip
    // (the order of events, and so every result, is unchanged).
    if (queue_.would_run_next(now)) continue;
    queue_.push(now, rank);
    return;
  }
  stats.finish_ns = now;
}

Status Simulation::stuck_error() const {
  std::ostringstream msg;
  msg << "the schedule cannot drain: ";
  int shown = 0, stuck = 0;
  for (int r = 0; r < S_; ++r) {
    const RankState& st = ranks_[r];
    if (st.pc >= lists_[r].size()) continue;
    // With no event left, an unfinished rank can only be waiting for an arrival.
    HARP_CHECK(st.wait != Wait::kNone) << "rank " << r;
    ++stuck;
    if (shown == 8) continue;
    if (st.wait == Wait::kStep) {
      msg << (shown++ ? "; " : "") << "rank " << r << " waits at STEP for the ranks that never reach theirs";
      continue;
    }
    const bool act = st.wait == Wait::kActivation;
    msg << (shown++ ? "; " : "") << "rank " << r << " waits at action " << st.pc << " ("
        << schedule::to_string(lists_[r][st.pc]) << ") for the "
        << (act ? "activation" : "gradient") << " of microbatch " << st.wait_microbatch
        << " from rank " << (act ? r - 1 : r + 1) << ", which never sends it";
  }
  if (stuck > shown) msg << "; and " << (stuck - shown) << " more stuck ranks";
  msg << " (run schedule::validate for a step-by-step report)";
  return failed_precondition(msg.str());
}

StatusOr<SimResult> Simulation::run() {
  for (int r = 0; r < S_; ++r) queue_.push(0, r);
  while (!queue_.empty()) {
    const EventQueue::Event e = queue_.pop();
    advance(e.rank, e.time_ns);
  }
  std::size_t executed = 0;
  bool drained = true;
  for (int r = 0; r < S_; ++r) {
    executed += ranks_[r].pc;
    drained = drained && ranks_[r].pc == lists_[r].size();
  }
  if (!drained) return stuck_error();

  result_.actions_executed = executed;
  Nanos compute_total = 0;
  for (int r = 0; r < S_; ++r) {
    RankStats& rs = result_.ranks[r];
    result_.iteration_ns = std::max(result_.iteration_ns, rs.finish_ns);
    compute_total += rs.compute_ns;
  }
  // The step's metrics reduction: the next iteration starts on every rank once the last
  // has finished this one.
  if (step_ranks_ > 0) result_.iteration_ns += sync_ns_;
  result_.bubble_fraction =
      result_.iteration_ns > 0
          ? 1.0 - static_cast<double>(compute_total) /
                      (static_cast<double>(S_) * static_cast<double>(result_.iteration_ns))
          : 0.0;
  // A RECV's span carries the arrival of its data, so traces can show the wait.
  for (Span& sp : result_.spans) {
    if (!sp.action.is_recv()) continue;
    const std::size_t slot = static_cast<std::size_t>(sp.rank) * M_ + sp.action.microbatch;
    const Nanos arrive = sp.action.kind == ActionKind::kRecvF ? act_arrival_ns_[slot]
                                                             : grad_arrival_ns_[slot];
    sp.arrive_ns = arrive == kNotYet ? sp.start_ns : arrive;
  }
  return std::move(result_);
}

}  // namespace

Seconds step_sync_s(const plan::Plan& plan) {
  // A ring all-reduce of two numbers over the stages: 2 (S - 1) messages of a few bytes,
  // each over a stage boundary's link; the slowest latency stands for each (Gloo's small
  // all-reduce, latency-bound; dp and tp replicas are not counted).
  const int S = plan.num_stages();
  Seconds latency = 0;
  for (const plan::Stage& s : plan.stages) latency = std::max(latency, s.comm_latency_s);
  return S > 1 ? 2.0 * (S - 1) * latency : 0.0;
}

StatusOr<SimResult> simulate(const plan::Plan& plan, const schedule::Schedule& lowered,
                             const SimOptions& options) {
  const int S = lowered.num_stages;
  if (S != plan.num_stages() || static_cast<int>(lowered.actions.size()) != S)
    return invalid_argument("the schedule has " + std::to_string(S) + " stages (" +
                            std::to_string(lowered.actions.size()) +
                            " rank lists) but the plan has " +
                            std::to_string(plan.num_stages()) +
                            "; generate the schedule from this plan");
  if (S < 1 || lowered.num_microbatches < 1)
    return invalid_argument("the schedule needs at least one stage and one microbatch");
  std::vector<StageNanos> times(static_cast<std::size_t>(S));
  for (int i = 0; i < S; ++i) HARP_RETURN_IF_ERROR(convert_stage(plan.stages[i], i, &times[i]));
  HARP_RETURN_IF_ERROR(check_lists(lowered));
  // Every event time is at most the sum of all work and transfers (check_lists allows
  // each action once), so this bound keeps int64 nanoseconds from overflowing.
  const double M = lowered.num_microbatches;
  double bound_ns = 0;
  for (const StageNanos& t : times)
    bound_ns += M * static_cast<double>(t.fwd + t.bwd + 2 * t.comm) +
                static_cast<double>(t.allreduce + t.optimizer);
  if (bound_ns > 4e18)
    return invalid_argument("the plan's times over " + std::to_string(lowered.num_microbatches) +
                            " microbatches add up to more than 4e18 ns; check the units of "
                            "fwd_s, bwd_s and comm_s (seconds)");

  const Nanos sync_ns = s_to_ns(step_sync_s(plan));
  Simulation sim(lowered, std::move(times), sync_ns, options);
  HARP_ASSIGN_OR_RETURN(SimResult result, sim.run());
  for (int i = 0; i < S; ++i) {
    RankStats& rs = result.ranks[i];
    rs.peak_memory_bytes = plan.stages[i].memory_static_bytes +
                           schedule::peak_held_bytes(lowered.actions[i], plan.stages[i].activation_bytes,
                                                     plan.stages[i].weight_grad_bytes);
  }
  return result;
}

}  // namespace harp::sim
