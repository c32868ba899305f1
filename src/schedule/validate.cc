// The schedule validator: static checks (counts, per-rank order, FIFO channel pairing),
// then a step-synchronous simulation that proves the lowered lists drain. It models
// ordering only; durations, bandwidth and memory are the simulator's business.
#include "harp/schedule/validate.h"

#include <algorithm>
#include <deque>
#include <string>

#include "harp/schedule/grid.h"

namespace harp::schedule {
namespace {

constexpr int kGridWindow = 12;  // executed steps shown above the stuck one

std::string at(int rank, size_t index, const Action& a) {
  return to_string(a) + " (rank " + std::to_string(rank) + " position " + std::to_string(index) +
         ")";
}

ValidationResult failure(std::string error, int num_ranks, int steps = 0) {
  ValidationResult r;
  r.error = std::move(error);
  r.steps = steps;
  r.peak_inflight.assign(std::max(num_ranks, 0), 0);
  return r;
}

// Shape checks shared by both validators; "" when fine.
std::string check_shape(const Schedule& s) {
  if (s.num_stages < 1) return "schedule has no stages";
  if (static_cast<int>(s.actions.size()) != s.num_stages)
    return "schedule has " + std::to_string(s.actions.size()) + " rank lists for " +
           std::to_string(s.num_stages) + " stages";
  if (s.num_microbatches < 1) return "schedule has no microbatches";
  return "";
}

// Where each rank's actions sit: index of each (kind, microbatch), or -1.
struct RankIndex {
  // pos[kind][m]; kinds with a microbatch only.
  std::vector<std::vector<long>> pos;
  long reduce_grad = -1, step = -1;
};

class Validator {
 public:
  Validator(const Schedule& s, SendMode mode) : s_(s), mode_(mode), S_(s.num_stages) {}

  ValidationResult run() {
    if (std::string e = check_shape(s_); !e.empty()) return failure(e, S_);
    if (std::string e = index_ranks(); !e.empty()) return failure(e, S_);
    if (std::string e = pair_channels(); !e.empty()) return failure(e, S_);
    return simulate();
  }

 private:
  struct Partner {
    int rank = -1;
    long index = -1;
  };

  // Checks stage fields, counts and per-rank order, and fills index_.
  std::string index_ranks() {
    const int M = s_.num_microbatches;
    index_.assign(S_, RankIndex{});
    partner_.assign(S_, {});
    for (int r = 0; r < S_; ++r) {
      RankIndex& ix = index_[r];
      ix.pos.assign(kNumActionKinds, std::vector<long>(M, -1));
      const auto& list = s_.actions[r];
      partner_[r].assign(list.size(), Partner{});
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        if (a.stage != r)
          return at(r, i, a) + " has stage " + std::to_string(a.stage) +
                 "; every action on rank " + std::to_string(r) + " must be for stage " +
                 std::to_string(r);
        if (a.kind == ActionKind::kReduceGrad || a.kind == ActionKind::kStep) {
          long& slot = a.kind == ActionKind::kStep ? ix.step : ix.reduce_grad;
          if (slot >= 0) return at(r, i, a) + " appears twice on rank " + std::to_string(r);
          slot = static_cast<long>(i);
          continue;
        }
        if (a.microbatch < 0 || a.microbatch >= M)
          return at(r, i, a) + " names microbatch " + std::to_string(a.microbatch) +
                 ", outside [0, " + std::to_string(M) + ")";
        const bool to_next = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB;
        const bool to_prev = a.kind == ActionKind::kSendB || a.kind == ActionKind::kRecvF;
        if ((to_next && r == S_ - 1) || (to_prev && r == 0))
          return at(r, i, a) + " talks to a stage that does not exist (" +
                 std::to_string(S_) + " stages)";
        long& slot = ix.pos[static_cast<int>(a.kind)][a.microbatch];
        if (slot >= 0) return at(r, i, a) + " appears twice on rank " + std::to_string(r);
        slot = static_cast<long>(i);
      }
      for (int m = 0; m < M; ++m) {
        if (std::string e = check_order(r, m); !e.empty()) return e;
      }
      long last_b = -1;  // the last backward work: a B or a W
      for (ActionKind k : {ActionKind::kB, ActionKind::kW})
        last_b = std::max(last_b, *std::max_element(ix.pos[int(k)].begin(), ix.pos[int(k)].end()));
      const std::string rank = "rank " + std::to_string(r);
      if (ix.reduce_grad < 0) return rank + " has no REDUCE_GRAD after its last backward";
      if (ix.reduce_grad < last_b)
        return rank + ": REDUCE_GRAD at position " + std::to_string(ix.reduce_grad) +
               " comes before the last backward at position " + std::to_string(last_b);
      if (ix.step < 0) return rank + " has no STEP after REDUCE_GRAD";
      if (ix.step < ix.reduce_grad)
        return rank + ": STEP at position " + std::to_string(ix.step) +
               " comes before REDUCE_GRAD at position " + std::to_string(ix.reduce_grad);
    }
    return "";
  }

  long pos(int r, ActionKind k, int m) const { return index_[r].pos[static_cast<int>(k)][m]; }

  // Every action a rank needs for microbatch m exists and comes in a usable order. The
  // backward is one B, or an I (input gradient) and a later W (weight gradients).
  std::string check_order(int r, int m) const {
    struct Rule {
      bool applies;
      ActionKind first, then;
      const char* why;
    };
    const std::string rank = "rank " + std::to_string(r);
    const bool split = pos(r, ActionKind::kI, m) >= 0 || pos(r, ActionKind::kW, m) >= 0;
    if (split && pos(r, ActionKind::kB, m) >= 0)
      return rank + " runs both " + to_string({r, ActionKind::kB, m}) + " and a split backward (I/W) of microbatch " +
             std::to_string(m) + "; run one B or one I and one W";
    const ActionKind bwd = split ? ActionKind::kI : ActionKind::kB;
    const Rule rules[] = {
        {true, ActionKind::kF, bwd, "a backward needs its forward"},
        {split, ActionKind::kI, ActionKind::kW, "a weight gradient needs its input gradient"},
        {r > 0, ActionKind::kRecvF, ActionKind::kF, "the forward needs its input"},
        {r > 0, bwd, ActionKind::kSendB, "only a finished backward is sent"},
        {r < S_ - 1, ActionKind::kF, ActionKind::kSendF, "only a finished forward is sent"},
        {r < S_ - 1, ActionKind::kRecvB, bwd, "the backward needs its gradient"},
    };
    for (const Rule& rule : rules) {
      if (!rule.applies) continue;
      for (ActionKind k : {rule.first, rule.then})
        if (pos(r, k, m) < 0) return rank + " never runs " + to_string({r, k, m});
      if (pos(r, rule.first, m) > pos(r, rule.then, m))
        return rank + ": " + to_string({r, rule.first, m}) + " at position " +
               std::to_string(pos(r, rule.first, m)) + " must come before " +
               to_string({r, rule.then, m}) + " at position " +
               std::to_string(pos(r, rule.then, m)) + " (" + rule.why + ")";
    }
    return "";
  }

  // FIFO without tags: the k-th send on a channel meets the k-th receive on it.
  std::string pair_channels() {
    for (int r = 0; r < S_; ++r) {
      for (int dir = 0; dir < 2; ++dir) {
        const bool forward = dir == 0;
        const int peer = forward ? r + 1 : r - 1;
        if (peer < 0 || peer >= S_) continue;
        const ActionKind send = forward ? ActionKind::kSendF : ActionKind::kSendB;
        const ActionKind recv = forward ? ActionKind::kRecvF : ActionKind::kRecvB;
        std::vector<long> sends, recvs;
        for (size_t i = 0; i < s_.actions[r].size(); ++i)
          if (s_.actions[r][i].kind == send) sends.push_back(static_cast<long>(i));
        for (size_t i = 0; i < s_.actions[peer].size(); ++i)
          if (s_.actions[peer][i].kind == recv) recvs.push_back(static_cast<long>(i));
        const std::string channel = "channel rank " + std::to_string(r) + " -> rank " +
                                    std::to_string(peer) + (forward ? " (forward)" : " (backward)");
        // Counts match here: index_ranks() demanded one of each per microbatch.
        HARP_CHECK_EQ(sends.size(), recvs.size());
        for (size_t k = 0; k < sends.size(); ++k) {
          const Action& a = s_.actions[r][sends[k]];
          const Action& b = s_.actions[peer][recvs[k]];
          if (a.microbatch != b.microbatch)
            return "microbatch mismatch on " + channel + ": send #" + std::to_string(k) + " is " +
                   at(r, sends[k], a) + " but receive #" + std::to_string(k) + " is " +
                   at(peer, recvs[k], b) +
                   "; sends and receives pair in FIFO order without tags, so list them in the "
                   "same microbatch order on both ranks";
          partner_[r][sends[k]] = {peer, recvs[k]};
          partner_[peer][recvs[k]] = {r, sends[k]};
        }
      }
    }
    return "";
  }

  bool done(int r) const { return pc_[r] >= s_.actions[r].size(); }
  bool executed(int r, long index) const { return static_cast<long>(pc_[r]) > index; }
  std::string head(int r) const {
    return done(r) ? "done" : to_string(s_.actions[r][pc_[r]]);
  }
  // The receive whose data compute action a on rank r consumes, or -1 if none.
  long input_recv(int r, const Action& a) const {
    if (a.kind == ActionKind::kF) return r > 0 ? pos(r, ActionKind::kRecvF, a.microbatch) : -1;
    if (a.is_input_backward())
      return r < S_ - 1 ? pos(r, ActionKind::kRecvB, a.microbatch) : -1;
    return -1;
  }

  // Whether rank r may run its next action, judged on the state at the start of the
  // step so the outcome does not depend on the order ranks are visited in. On false,
  // *why (when given) says what it waits for: only a deadlock's report asks, since building
  // the text for every waiting rank at every step made 4,096 stages take 9 s.
  bool enabled(int r, std::string* why) const {
    const Action& a = s_.actions[r][pc_[r]];
    if (a.is_compute()) {
      // Static order put the input RECV (and the own forward) earlier on this rank, so
      // only the peer's send can still be missing; under rendezvous it never is.
      const long recv = input_recv(r, a);
      if (recv < 0) return true;
      HARP_CHECK(executed(r, recv));
      const Partner& p = partner_[r][recv];
      if (executed(p.rank, p.index)) return true;
      if (why == nullptr) return false;
      *why = "the data of " + to_string(s_.actions[p.rank][p.index]) + " from rank " +
             std::to_string(p.rank) + " (rank " + std::to_string(p.rank) + " is at " +
             head(p.rank) + ")";
      return false;
    }
    if (!a.is_send() && !a.is_recv()) return true;
    if (mode_ == SendMode::kAsyncSends) return true;
    // Rendezvous: each side of a pair needs the other posted, so a pair completes in
    // the step where both are their ranks' next actions (the partner is then enabled
    // by the same rule, so both run together).
    const Partner& p = partner_[r][pc_[r]];
    if (executed(p.rank, p.index) || static_cast<long>(pc_[p.rank]) == p.index) return true;
    if (why == nullptr) return false;
    *why = std::string(a.is_send() ? "its receive " : "its send ") +
           to_string(s_.actions[p.rank][p.index]) + " (rank " + std::to_string(p.rank) +
           " is at " + head(p.rank) + ")";
    return false;
  }

  ValidationResult simulate() {
    pc_.assign(S_, 0);
    std::vector<int> inflight(S_, 0);
    ValidationResult result;
    result.peak_inflight.assign(S_, 0);
    // The last steps, as each rank's executed action index (-1: idle), for the report.
    std::deque<std::vector<long>> recent;
    int step = 0;
    std::vector<char> go(S_, 0);
    while (true) {
      bool all_done = true;
      for (int r = 0; r < S_; ++r) {
        go[r] = 0;
        if (done(r)) continue;
        all_done = false;
        go[r] = enabled(r, nullptr);
      }
      if (all_done) break;
      if (std::none_of(go.begin(), go.end(), [](char c) { return c != 0; })) {
        std::vector<std::string> why(S_);
        for (int r = 0; r < S_; ++r)
          if (!done(r)) enabled(r, &why[r]);
        result.error = deadlock_report(step, why, recent);
        result.steps = step;
        return result;
      }
      std::vector<long> row(S_, -1);
      for (int r = 0; r < S_; ++r) {
        if (!go[r]) continue;
        row[r] = static_cast<long>(pc_[r]);
        const Action& a = s_.actions[r][pc_[r]++];
        if (a.kind == ActionKind::kF) ++inflight[r];
        if (a.is_input_backward()) --inflight[r];
        result.peak_inflight[r] = std::max(result.peak_inflight[r], inflight[r]);
      }
      recent.push_back(std::move(row));
      if (static_cast<int>(recent.size()) > kGridWindow) recent.pop_front();
      ++step;
    }
    result.ok = true;
    result.steps = step;
    return result;
  }

  std::string deadlock_report(int step, const std::vector<std::string>& why,
                              const std::deque<std::vector<long>>& recent) const {
    std::string summary = "deadlock at step " + std::to_string(step) + " (" +
                          (mode_ == SendMode::kRendezvous ? "rendezvous" : "async") +
                          " sends): ";
    std::vector<std::vector<std::string>> rows;
    for (const auto& executed_at : recent) {
      std::vector<std::string> row(S_, ".");
      for (int r = 0; r < S_; ++r)
        if (executed_at[r] >= 0) row[r] = to_string(s_.actions[r][static_cast<size_t>(executed_at[r])]);
      rows.push_back(std::move(row));
    }
    std::vector<std::string> stuck(S_, ".");
    bool first = true;
    for (int r = 0; r < S_; ++r) {
      if (done(r)) continue;
      stuck[r] = head(r);
      summary += (first ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits at " +
                 head(r) + " for " + why[r];
      first = false;
    }
    rows.push_back(stuck);
    const int first_step = step - static_cast<int>(recent.size());
    return summary + "\n" +
           format_grid(rows, S_, static_cast<int>(rows.size()) - 1, first_step) +
           "(rows are steps, columns ranks; '>>' marks the stuck step and where each rank waits)";
  }

  const Schedule& s_;
  const SendMode mode_;
  const int S_;
  std::vector<RankIndex> index_;
  std::vector<std::vector<Partner>> partner_;  // per action: its channel partner, if any
  std::vector<size_t> pc_;                     // per rank: index of its next action
};

}  // namespace

ValidationResult validate(const Schedule& lowered, SendMode mode) {
  return Validator(lowered, mode).run();
}

ValidationResult validate_compute(const Schedule& compute) {
  const int S = compute.num_stages, M = compute.num_microbatches;
  if (std::string e = check_shape(compute); !e.empty()) return failure(e, S);
  ValidationResult result;
  result.peak_inflight.assign(S, 0);
  for (int r = 0; r < S; ++r) {
    std::vector<long> f_at(M, -1), b_at(M, -1), i_at(M, -1), w_at(M, -1);
    int inflight = 0;
    const auto& list = compute.actions[r];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (!a.is_compute()) return failure(at(r, i, a) + " is not F, B, I or W in a compute schedule", S);
      if (a.stage != r)
        return failure(at(r, i, a) + " has stage " + std::to_string(a.stage) +
                           "; it must equal the rank",
                       S);
      if (a.microbatch < 0 || a.microbatch >= M)
        return failure(at(r, i, a) + " names a microbatch outside [0, " + std::to_string(M) + ")",
                       S);
      std::vector<long>& seen = a.kind == ActionKind::kF   ? f_at
                                : a.kind == ActionKind::kB ? b_at
                                : a.kind == ActionKind::kI ? i_at
                                                           : w_at;
      if (seen[a.microbatch] >= 0) return failure(at(r, i, a) + " appears twice", S);
      seen[a.microbatch] = static_cast<long>(i);
      if (a.is_input_backward() && f_at[a.microbatch] < 0)
        return failure(at(r, i, a) + " comes before its forward on rank " + std::to_string(r), S);
      if (a.kind == ActionKind::kW && i_at[a.microbatch] < 0)
        return failure(at(r, i, a) + " comes before its input gradient " +
                           to_string({r, ActionKind::kI, a.microbatch}) + " on rank " + std::to_string(r),
                       S);
      if (a.kind == ActionKind::kW) continue;
      inflight += a.kind == ActionKind::kF ? 1 : -1;
      result.peak_inflight[r] = std::max(result.peak_inflight[r], inflight);
    }
    for (int m = 0; m < M; ++m) {
      const bool split = i_at[m] >= 0 || w_at[m] >= 0;
      if (split && b_at[m] >= 0)
        return failure("rank " + std::to_string(r) + " runs both " + to_string({r, ActionKind::kB, m}) +
                           " and a split backward of microbatch " + std::to_string(m),
                       S);
      const ActionKind missing = f_at[m] < 0                ? ActionKind::kF
                                 : !split && b_at[m] < 0    ? ActionKind::kB
                                 : split && i_at[m] < 0     ? ActionKind::kI
                                 : split && w_at[m] < 0     ? ActionKind::kW
                                                            : ActionKind::kStep;
      if (missing != ActionKind::kStep)
        return failure("rank " + std::to_string(r) + " never runs " + to_string({r, missing, m}), S);
    }
  }
  // Unit-time pipeline (grid.h's clock): proves the per-rank orders agree with each
  // other, since a cycle across ranks (B1 waiting on F1 behind it) never finishes.
  std::vector<std::vector<int>> f_end(S, std::vector<int>(M, -1)), b_end = f_end;
  std::vector<size_t> next(S, 0);
  std::vector<int> free_at(S, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < S; ++r) {
      if (next[r] == compute.actions[r].size()) continue;
      const Action& a = compute.actions[r][next[r]];
      const int m = a.microbatch;
      // A W waits for nothing on other ranks (its I is earlier on this one).
      const int dep = a.kind == ActionKind::kF   ? (r > 0 ? f_end[r - 1][m] : 0)
                      : a.kind == ActionKind::kW ? 0
                                                 : (r < S - 1 ? b_end[r + 1][m] : 0);
      if (dep < 0) continue;
      free_at[r] = std::max(free_at[r], dep) + 1;
      if (a.kind != ActionKind::kW) (a.kind == ActionKind::kF ? f_end : b_end)[r][m] = free_at[r];
      result.steps = std::max(result.steps, free_at[r]);
      ++next[r];
      progress = true;
    }
  }
  std::string stuck;
  for (int r = 0; r < S; ++r) {
    if (next[r] == compute.actions[r].size()) continue;
    const Action& a = compute.actions[r][next[r]];
    const Action input = a.kind == ActionKind::kF ? Action{r - 1, ActionKind::kF, a.microbatch}
                                                  : Action{r + 1, a.kind, a.microbatch};
    stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
             " waits at " + to_string(a) + " for " + to_string(input);
  }
  if (!stuck.empty()) return failure("compute order deadlocks across ranks: " + stuck, S);
  result.ok = true;
  return result;
}

}  // namespace harp::schedule
