// Lowering a compute-only schedule to per-rank lists with SEND/RECV, REDUCE_GRAD and STEP,
// after PyTorch pipelining's `_add_send_recv`. A receive is never placed by its own rank:
// the producer places it when it places the compute that produces the data, so every
// pair of ranks sees its communication in the single order in which it was created.
#include "harp/schedule/lowering.h"

#include <string>
#include <vector>

namespace harp::schedule {
namespace {

Status check_compute_input(const Schedule& compute) {
  const int S = compute.num_stages, M = compute.num_microbatches;
  if (S < 1) return invalid_argument("lowering: schedule has no stages");
  if (static_cast<int>(compute.actions.size()) != S)
    return invalid_argument("lowering: schedule has " + std::to_string(compute.actions.size()) +
                            " rank lists for " + std::to_string(S) + " stages");
  for (int r = 0; r < S; ++r) {
    for (const Action& a : compute.actions[r]) {
      const std::string where = "lowering: rank " + std::to_string(r) + " action " + to_string(a);
      if (!a.is_compute())
        return invalid_argument(where + ": the input must hold only F, B, I and W actions");
      if (a.stage != r)
        return invalid_argument(where + ": its stage must equal the rank (" + std::to_string(r) +
                                ")");
      if (a.microbatch < 0 || a.microbatch >= M)
        return invalid_argument(where + ": microbatch outside [0, " + std::to_string(M) + ")");
    }
  }
  return Status::ok_status();
}

}  // namespace

StatusOr<Schedule> lower(const Schedule& compute) {
  HARP_RETURN_IF_ERROR(check_compute_input(compute));
  const int S = compute.num_stages, M = compute.num_microbatches;

  Schedule out;
  out.num_stages = S;
  out.num_microbatches = M;
  out.actions.resize(S);
  // What each rank's list holds so far. A placed RECV is what lets the consumer place
  // the compute that needs it; PyTorch also accepts the producer's compute on the same
  // rank, which only matters when one rank holds several stages (never here).
  std::vector<std::vector<char>> recv_f(S, std::vector<char>(M, 0));
  std::vector<std::vector<char>> recv_b(S, std::vector<char>(M, 0));
  std::vector<std::vector<char>> f_placed(S, std::vector<char>(M, 0));
  std::vector<std::vector<char>> i_placed(S, std::vector<char>(M, 0));
  std::vector<size_t> next(S, 0);

  auto ready = [&](int r, const Action& a) {
    const int m = a.microbatch;
    if (a.kind == ActionKind::kF) return r == 0 || recv_f[r][m];
    // The own-rank conditions only fail for a B or I listed before its F, or a W before
    // its I, which can never make progress and are reported as stuck below.
    if (a.kind == ActionKind::kW) return static_cast<bool>(i_placed[r][m]);
    return f_placed[r][m] && (r == S - 1 || recv_b[r][m]);
  };

  size_t remaining = compute.total_actions();
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < S; ++r) {
      if (next[r] == compute.actions[r].size()) continue;
      const Action& a = compute.actions[r][next[r]];
      if (!ready(r, a)) continue;
      out.actions[r].push_back(a);
      const int m = a.microbatch;
      if (a.kind == ActionKind::kI) i_placed[r][m] = 1;
      if (a.kind == ActionKind::kF) {
        f_placed[r][m] = 1;
        if (r < S - 1) {
          out.actions[r].push_back({r, ActionKind::kSendF, m});
          out.actions[r + 1].push_back({r + 1, ActionKind::kRecvF, m});
          recv_f[r + 1][m] = 1;
        }
      } else if (a.kind == ActionKind::kW) {
        // Weight gradients stay on the stage: nothing to send.
      } else if (r > 0) {
        out.actions[r].push_back({r, ActionKind::kSendB, m});
        out.actions[r - 1].push_back({r - 1, ActionKind::kRecvB, m});
        recv_b[r - 1][m] = 1;
      }
      ++next[r];
      --remaining;
      progress = true;
    }
    if (!progress) {
      std::string stuck;
      for (int r = 0; r < S; ++r) {
        if (next[r] == compute.actions[r].size()) continue;
        const Action& a = compute.actions[r][next[r]];
        std::string why;
        if (a.is_input_backward() && !f_placed[r][a.microbatch])
          why = "its forward " + to_string({r, ActionKind::kF, a.microbatch}) +
                " is not before it on this rank";
        else if (a.kind == ActionKind::kW)
          why = "its input gradient " + to_string({r, ActionKind::kI, a.microbatch}) +
                " is not before it on this rank";
        else if (a.kind == ActionKind::kF)
          why = "needs " + to_string({r - 1, ActionKind::kF, a.microbatch}) + " from rank " +
                std::to_string(r - 1);
        else
          why = "needs the backward of microbatch " + std::to_string(a.microbatch) + " from rank " +
                std::to_string(r + 1);
        stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                 " at " + to_string(a) + " (" + why + ")";
      }
      return invalid_argument("lowering: the compute order cannot make progress: " + stuck);
    }
  }
  // Every RECV a rank will ever get precedes its last backward (that backward needed
  // the last RECV_B, and all forwards came before it), so appending at the end puts
  // REDUCE_GRAD right after the last backward and its send.
  for (int r = 0; r < S; ++r) {
    out.actions[r].push_back({r, ActionKind::kReduceGrad, -1});
    out.actions[r].push_back({r, ActionKind::kStep, -1});
  }
  return out;
}

}  // namespace harp::schedule
