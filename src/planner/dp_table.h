// The DP of the exact HARP search for one cap on the period (internal to the planner).
//
// A state is (l, pos, u, att): the downstream part of the pipeline covers layers
// [l, L); its head stage starts at layer l on the subcluster at position `pos` of the
// order; u devices of that subcluster are used by the head and the stages after it in the
// same subcluster; att says whether some stage time or link time equals the cap. Each
// state keeps the Pareto front of (sum = Σ(t + 2c), n = head launch count,
// e = max(ar + opt)) over its partial pipelines. The upstream part only needs these
// three numbers, so keeping every entry no other entry dominates is exact (dominance is
// defined in dp_table.cc: it compares sum and sum + e, not e alone).
//
// Invariants: states are filled for l from L-1 down to 0; an entry's `prev` points to an
// entry of a state with a larger l (or -1 for the tail stage).
#pragma once

#include <limits>
#include <vector>

#include "harp/cluster/cluster.h"
#include "harp/plan/closed_form.h"
#include "harp/planner/harp_search.h"
#include "harp/cost/mixed_stage.h"
#include "harp/cost/stage_costs.h"
#include "lane_pool.h"

namespace harp::planner {

struct DpMesh {
  int devices = 1, dp = 1, tp = 1;
  int zero = 0;  // ZeRO level (0 when dp is 1)
  bool whole_nodes = false;
  RangeView view;
};

// A mixed stage the search may place (cost/mixed_stage.h): part A takes the rest of
// its position's devices (`devices_a` of them, a group inside a node or whole nodes),
// part B the first `devices_b` of the next position's.
struct DpMixed {
  int devices_a = 1, devices_b = 1;
  bool whole_a = false;
  cost::MixedView view;
};

struct DpProblem {
  bool valid = false;
  const StageCosts* costs = nullptr;
  std::vector<int> order;  // position -> subcluster index
  int C = 0, L = 0, B = 1, max_devices = 0;
  bool allow_idle = false, harp = true;
  int candidates = 0;  // SearchOptions::candidates
  std::vector<Recompute> recompute;            // the modes a stage may use (SearchOptions)
  std::vector<int> devices, devices_per_node;  // per position
  std::vector<Bytes> usable;                   // per position
  std::vector<std::vector<DpMesh>> meshes;     // per position
  std::vector<cluster::Link> intra, inter;     // per position
  std::vector<std::vector<char>> linked;       // [p][q]: a link joins positions p < q
  std::vector<std::vector<cluster::Link>> cross;
  std::vector<Bytes> cut_bytes;                // per layer: bytes after it per microbatch
  // Transfer time of a cut after layer l: inside a node, between nodes of a position,
  // and over the link from position p to q (indexed [p * C + q][l]).
  std::vector<std::vector<Seconds>> cut_intra_s, cut_inter_s, cut_cross_s;
  // SearchOptions::mixed_stages: per position, the mixed stages that start on it; and
  // for every pair of positions p < q the cut over the path between them (the declared
  // link when there is one), indexed [p * C + q][l]: a mixed stage's parts reach past
  // the next position.
  std::vector<std::vector<DpMixed>> mixed;
  std::vector<std::vector<Seconds>> cut_path_s;
  bool any_mixed = false;
  // The T of the best plan without mixed stages (infinity: none), and a period no plan
  // can beat (min_feasible_period_bound). A plan holding a mixed stage M has
  // T >= t_M + (B - 1) max(t_M, floor) + e_M, so an M for which that exceeds the
  // incumbent cannot be part of a faster plan and is left out (rows, candidate periods,
  // and whole options: prune_mixed_stages).
  double incumbent_s = std::numeric_limits<double>::infinity();
  Seconds period_floor_s = 0;
  // Only plans holding a mixed stage are searched (those without one were, before: the
  // incumbent is their optimum). A partial plan without one is kept only while some
  // upstream part holding one could complete it below the bound (DpTable's upm_), and
  // never dominates a partial plan with one.
  bool require_mixed = false;
  // Whether a plan whose period is `cap` could beat the incumbent at all.
  bool cap_useful(Seconds cap) const { return (B - 1) * cap < incumbent_s * (1 + 1e-12); }
  bool beaten(Seconds t, Seconds e) const {
    return t + (B - 1) * std::max(t, period_floor_s) + e > incumbent_s * (1 + 1e-12);
  }
  const std::vector<Seconds>& path_cut(int p, int q) const { return cut_path_s[p * C + q]; }
  // The link time out of a part on position `from` to a stage part on `to` (>= from) at
  // cut l; inside one position, `inter` says whether it leaves the node.
  Seconds cut_s(int from, int to, bool inter, int l) const {
    if (from == to) return (inter ? cut_inter_s : cut_intra_s)[from][l];
    return path_cut(from, to)[l];
  }

  // Devices a mesh occupies from `offset` (index inside the subcluster) stay in one node
  // (groups) or start at a node boundary (whole nodes).
  bool fits(int pos, const DpMesh& m, int offset) const { return fits(pos, m.devices, m.whole_nodes, offset); }
  bool fits(int pos, int devices, bool whole_nodes, int offset) const {
    const int dpn = devices_per_node[pos];
    if (whole_nodes) return offset % dpn == 0;
    return offset / dpn == (offset + devices - 1) / dpn;
  }
  // δ of the launch-count rule for a link time c under period cap (closed_form.h).
  int delta(bool crosses_nodes, Seconds c, Seconds cap) const {
    return plan::launch_delta(crosses_nodes, c, cap, harp);
  }
};

// Builds the problem for one subcluster order (dp_problem.cc, as are mesh_sizes,
// candidate_caps and min_feasible_period_bound). `valid` is false when the order cannot
// hold a pipeline (consecutive subclusters not linked while every device must be used).
DpProblem make_dp_problem(const StageCosts& costs, const std::vector<int>& order,
                          const SearchOptions& options);

// The mesh sizes a subcluster of `nodes` nodes of `devices_per_node` offers: each
// power-of-two group inside a node, then whole nodes (devices, whole_nodes).
std::vector<std::pair<int, bool>> mesh_sizes(int devices_per_node, int nodes);

// SearchOptions::mixed_stages: fills p.mixed, p.cut_path_s and p.any_mixed (dp_mixed.cc).
// Mixed stages join positions pos and pos + 1 when a link joins them and every device is
// used; their replicas share one tp and use no ZeRO.
void add_mixed_stages(DpProblem& p, const SearchOptions& options);

// Sets the incumbent (DpProblem::incumbent_s) and the period floor, and drops the mixed
// stages that cannot be part of a plan faster than it (on no layer range). Returns
// whether any mixed stage is left.
bool prune_mixed_stages(DpProblem& p, double incumbent_s);

// Every distinct stage time and link time a plan can have: the periods worth trying.
std::vector<Seconds> candidate_caps(const DpProblem& problem);

// A period no plan can beat: the heaviest layer on its cheapest mesh, and (every device
// used) the cheapest crossing of each link between consecutive subclusters.
Seconds min_feasible_period_bound(const DpProblem& problem);

struct DpOutcome {
  // min over plans with every t, c <= cap of (sum + e); the entry that reaches it.
  double relaxed = std::numeric_limits<double>::infinity();
  int relaxed_entry = -1;
  // the same over plans where some t or c equals the cap.
  double exact = std::numeric_limits<double>::infinity();
  int exact_entry = -1;
  long long states = 0, entries = 0;
};

class DpTable {
 public:
  // `threads` (>= 1) fill the states of one layer l side by side: they depend only on
  // states of larger l. The result does not depend on the count (the states' entries
  // are appended in one fixed order).
  explicit DpTable(const DpProblem& problem, int threads = 1);
  DpTable(const DpTable&) = delete;
  DpTable& operator=(const DpTable&) = delete;

  // Runs the DP for one cap. Partial plans that cannot end below `prune_at` in
  // sum + e (their sum + up_ + max(e, up_e_) reaches it) are dropped; pass infinity to
  // keep all. Reuses its buffers: no allocation once they have grown.
  DpOutcome run(Seconds cap, double prune_at = std::numeric_limits<double>::infinity());
  // Whether any plan has every t, c <= cap (δ from cap): the same DP keeping one entry
  // per state, the smallest launch count, which is all that memory feasibility needs.
  // Returns the entry of one such plan (for placements()), or -1.
  int feasible(Seconds cap);
  // No plan with every t, c <= cap has a smaller sum + e (the relaxation of up_; with
  // DpProblem::require_mixed, no plan holding a mixed stage).
  double lower_bound(Seconds cap);
  // The pipeline an entry of the last run describes, head first.
  std::vector<Placement> placements(int entry) const;

 private:
  struct Entry {
    double sum, e;
    int n, prev;
    int l, pos, u;
    std::int16_t mesh;
    std::int8_t recompute;  // the head stage's Recompute
    std::int8_t mixed;      // the entry's stages include a mixed one
  };
  // The least sum, e and launch count over a front's entries (each on its own): a front
  // none of whose entries can pass a check is skipped whole.
  struct Least {
    double sum = 0, e = 0;
    int n = 0;
  };
  static Least least_of(const Entry* first, size_t count);
  int state(int l, int pos, int u, int att) const {
    return ((l * p_.C + pos) * (p_.max_devices + 1) + u) * 2 + att;
  }
  int merged(int l, int pos, int att) const { return (l * p_.C + pos) * 2 + att; }
  // One thread's work on a layer: its states' fronts, in the order it filled them.
  struct Lane {
    std::vector<Entry> scratch[4];  // the state's fronts: att 0, att 1, mixed heads' att 0, att 1
    std::vector<Entry> out;
    std::vector<int> counts;  // per state filled: its four fronts' entries, in that order
    std::vector<int> jobs;    // the layer's jobs it filled, in order
    long long states = 0;
  };
  struct Where {  // where a job's fronts are: lane, first entry in its out, its index there
    int lane;
    size_t first;
    int index;
  };
  static bool dominates(const Entry& x, const Entry& y, bool feasibility_only);
  void offer(std::vector<Entry>& front, const Entry& candidate) const;
  // kMulti: several recomputation modes; false: the one mode of the problem, with the
  // mode loop gone at compile time (the search's hot path stays as fast as before).
  // Reads entries_ only: the lane keeps what it finds.
  template <bool kMulti>
  void fill_state(int l, int pos, int u, Seconds cap, double prune_at, Lane& lane) const;
  // Fills every state (pos, u) of layer l, on the lanes, then appends them in order.
  void fill_layer(int l, Seconds cap, double prune_at);
  // Whether a stage (regular or mixed) starting at layer l on pos can end where its
  // successor has entries in this run, or at the model's end (after build_rows(l)).
  bool may_have_entries(int l, int pos) const;
  // The mixed stages that head state (l, pos, u) (dp_mixed.cc): into lane.scratch[2, 3].
  void fill_mixed_heads(int l, int pos, int u, Seconds cap, double prune_at, Lane& lane) const;
  // Points mixed_at_ and mixed_count_ at the rows of the mixed stages that start at
  // layer l and stay within the cap (dp_mixed.cc).
  void build_mixed_rows(int l, Seconds cap);
  // bound_upstream's step for the mixed stages that start at layer l.
  void bound_mixed(int l, Seconds cap);
  void fill_merged(int l, int pos);
  // rows_ for the stages that start at layer l: every (position, mesh) and end l1 while
  // the stage stays within the cap and its static memory fits (every state of the layer
  // reads them).
  void build_rows(int l, Seconds cap);
  // Fills up_ for a cap (see up_).
  void bound_upstream(Seconds cap);
  int at(int l, int pos, int offset) const { return (l * p_.C + pos) * (p_.max_devices + 1) + offset; }
  // The first layer l1 >= l (l <= L) where some state of position pos has entries in
  // this run (L when none): stages ending elsewhere have nothing to extend, but the
  // model's end.
  int next_filled(int l, int pos) const { return next_filled_[l * p_.C + pos]; }

  const DpProblem& p_;
  std::vector<Entry> entries_;
  std::vector<int> off_, cnt_;    // per state
  std::vector<int> moff_, mcnt_;  // per merged (l, pos, att)
  std::vector<Least> least_, mleast_;  // per state, per merged
  std::vector<Entry> scratch_[2];
  std::vector<Lane> lanes_;
  LanePool pool_;  // one lane per Lane
  std::vector<std::pair<int, int>> jobs_;  // every layer's states (pos, u), in fill order
  std::vector<int> job_first_;             // per position: its first job
  std::vector<int> live_jobs_;             // the layer's jobs that may get entries (fill_layer)
  std::vector<Where> where_;
  // up_[at(l, pos, o)]: no upstream part (the stages before a head stage that starts at
  // layer l on device index o of position pos, and their links, the one into the head
  // included) has a smaller Σ(t + 2c) under the cap; infinity where none exists. The same
  // recurrence as run() from the other end, one value per state: exact except that launch
  // counts are taken as 1 (memory only relaxes). It prunes partial plans (sum + up + e
  // must stay below prune_at) and skips states no upstream part reaches.
  // down_[at(l, pos, o)]: the same for the parts covering [0, l) whose last stage ends
  // at index o of position pos (its outgoing link not yet counted).
  std::vector<double> up_, down_;
  // The same for max(ar + opt): the smallest the upstream part's can be (on its own).
  std::vector<double> up_e_, down_e_;
  // The upstream parts that end with a mixed stage, their link out included (bound_mixed),
  // folded into up_ when its layer comes.
  std::vector<double> xup_, xup_e_;
  // DpProblem::require_mixed: up_, down_ and their e over the parts holding a mixed
  // stage only (empty otherwise).
  std::vector<double> upm_, downm_, upm_e_, downm_e_;
  // A stage's figures for one start layer, mesh and end (build_rows).
  struct Row {
    Seconds t[kRecomputeModes], t_min, t_fits, e;  // t_fits: fastest mode that holds one microbatch
    Bytes act[kRecomputeModes], work[kRecomputeModes];
  };
  std::vector<Row> rows_;
  // A mixed stage's figures for one start layer, option and end: each part's memory.
  struct MixedRow {
    Seconds t[kRecomputeModes], t_min, e;
    Bytes act_a[kRecomputeModes], work_a[kRecomputeModes], act_b[kRecomputeModes], work_b[kRecomputeModes];
    bool fits_one[kRecomputeModes];  // both parts hold one microbatch in flight
  };
  // Per start layer, every option's rows whatever the cap (until the static memory or
  // the incumbent stops them), built on first use: a split costs O(microbatch size)
  // and the rows serve every DP run of the search.
  struct MixedCache {
    bool built = false;
    std::vector<MixedRow> rows;
    std::vector<int> first, count;  // per slot (pos * max_mixed_ + option)
  };
  void fill_mixed_cache(int l, MixedCache& cache) const;
  std::vector<MixedCache> mixed_cache_;
  std::vector<const MixedRow*> mixed_at_;  // per slot: layer l's rows
  std::vector<int> mixed_count_;           // per slot: how many are within the cap
  int max_mixed_ = 0;
  std::vector<int> next_filled_;  // per (l, pos), l <= L: see next_filled()
  std::vector<int> next_state_;   // at(l, pos, u): the same for the one state (pos, u)
  std::vector<int> xoff_, xcnt_;  // per state: the front of its mixed head stages
  std::vector<Least> xleast_;
  std::vector<int> row_first_, row_count_;  // per pos * max_meshes_ + mesh
  int max_meshes_ = 0;
  Seconds bound_cap_ = std::numeric_limits<double>::quiet_NaN();  // the cap up_ holds
  long long states_ = 0;
  bool feasibility_only_ = false;
};

}  // namespace harp::planner
