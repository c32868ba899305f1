// The slow oracle (see brute_force_planner.h): plain recursion over orders, subclusters,
// device counts, meshes and layer ranges; no pruning, no DP, no cleverness, so that a
// reader can check it against the search space of harp_search.h line by line.
#include "brute_force_planner.h"

#include <algorithm>
#include <numeric>

#include "harp/schedule/lower_plan.h"
#include "harp/sim/simulator.h"

namespace harp::planner::reference {
namespace {

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

bool same_placement(const Placement& a, const Placement& b) { return a == b; }

class Enumerator {
 public:
  Enumerator(const StageCosts& costs, const SearchOptions& options,
             const std::vector<Placement>* probe, const std::vector<plan::ScheduleKind>* kinds = nullptr)
      : costs_(costs), options_(options), cluster_(costs.cluster()), probe_(probe), kinds_(kinds) {}

  const JointResult& joint() const { return joint_; }

  BruteForceResult run() {
    const int C = static_cast<int>(cluster_.subclusters.size());
    std::vector<int> order(C);
    std::iota(order.begin(), order.end(), 0);
    // next_permutation from the sorted order visits every permutation exactly once.
    do {
      order_ = order;
      next_subcluster(0, 0, -1);
    } while (!options_.fixed_order && std::next_permutation(order.begin(), order.end()));
    return result_;
  }

 private:
  int num_subclusters() const { return static_cast<int>(order_.size()); }
  int num_layers() const { return costs_.num_layers(); }

  // Decides subclusters order_[pos..]; layers [layer, L) are still unplaced; `prev_sub` is
  // the last subcluster that got a stage (-1: none yet). A pipeline only goes from one
  // used subcluster to the next through a declared link.
  void next_subcluster(int pos, int layer, int prev_sub) {
    if (layer == num_layers()) {
      // The subclusters not reached get no stage: allowed only with idle devices.
      if (options_.allow_idle_devices || pos == num_subclusters()) score();
      return;
    }
    if (pos == num_subclusters()) return;  // layers left but no subcluster to run them
    const int sub = order_[pos];
    // Leave `sub` unused; the check below then links its neighbours directly.
    if (options_.allow_idle_devices) next_subcluster(pos + 1, layer, prev_sub);
    if (prev_sub >= 0 && !cluster_.link_between(prev_sub, sub).has_value()) return;
    // The stages of `sub` use its devices [D - used, D): idle devices are the lowest ids.
    const int D = cluster_.subclusters[sub].num_devices();
    for (int used = options_.allow_idle_devices ? 1 : D; used <= D; ++used)
      fill_subcluster(pos, sub, D - used, layer);
  }

  // Places the next stage of `sub` on devices from `offset`, with each recomputation mode
  // and ZeRO level of the options; stages take devices
  // consecutively, so when `offset` reaches D the tail-most stage ended at device D - 1.
  void fill_subcluster(int pos, int sub, int offset, int layer) {
    const auto& sc = cluster_.subclusters[sub];
    const int D = sc.num_devices();
    if (offset == D) {
      next_subcluster(pos + 1, layer, sub);
      return;
    }
    if (layer == num_layers()) return;  // devices still to fill but no layer left for them
    for (const MeshShape& m : meshes_at(costs_, options_, sub, offset, D - offset)) {
      for (int last = layer + 1; last <= num_layers(); ++last)
        for (Recompute r : options_.recompute)
          for (int zero : zero_levels(options_, m.dp)) {
        Placement p = place(sub, offset, m, layer, last, r);
        p.zero = zero;
        pipeline_.push_back(p);
        fill_subcluster(pos, sub, offset + m.devices, last);
        pipeline_.pop_back();
      }
    }
    fill_mixed(pos, sub, offset, layer);
  }

  // A stage on `m` from device `offset` of `sub`, layers [layer, last).
  Placement place(int sub, int offset, const MeshShape& m, int layer, int last, Recompute r) const {
    const int dpn = cluster_.subclusters[sub].devices_per_node;
    Placement p;
    p.subcluster = sub;
    p.first_node = offset / dpn;
    p.first_local = offset % dpn;
    p.devices = m.devices;
    p.dp = m.dp;
    p.tp = m.tp;
    p.first_layer = layer;
    p.last_layer = last;
    p.recompute = r;
    return p;
  }

  // A mixed stage: the rest of `sub`'s devices (from `offset`) as part A and the first
  // devices of the next subcluster of the order (linked to it) as part B, at one tp; the
  // pipeline goes on in the next subcluster after part B.
  void fill_mixed(int pos, int sub, int offset, int layer) {
    if (!options_.mixed_stages || options_.allow_idle_devices || pos + 1 >= num_subclusters()) return;
    const int next = order_[pos + 1];
    if (!cluster_.link_between(sub, next).has_value()) return;
    const int D = cluster_.subclusters[sub].num_devices();
    for (const MeshShape& a : shapes_at(costs_, options_, sub, offset, D - offset, false)) {
      if (offset + a.devices != D) continue;
      for (const MeshShape& b : shapes_at(costs_, options_, next, 0, cluster_.subclusters[next].num_devices(), false)) {
        if (b.tp != a.tp || !cost::has_mixed(costs_, {sub, a.dp, next, b.dp, a.tp})) continue;
        for (int last = layer + 1; last <= num_layers(); ++last)
          for (Recompute r : options_.recompute) {
            Placement p = place(sub, offset, a, layer, last, r);
            p.second_subcluster = next;
            p.second_devices = b.devices;
            p.second_dp = b.dp;
            pipeline_.push_back(p);
            fill_subcluster(pos + 1, next, b.devices, last);
            pipeline_.pop_back();
          }
      }
    }
  }

  static std::vector<int> launch_counts(const plan::Plan& plan) {
    std::vector<int> n;
    for (const auto& s : plan.stages) n.push_back(s.launch_count);
    return n;
  }

  // Scores the complete pipeline with the same plan assembly every strategy uses.
  void score() {
    BuildOptions build;
    build.microbatches = options_.microbatches;
    build.schedule = options_.schedule;
    const plan::Plan plan = build_plan(costs_, pipeline_, build);
    const Seconds t = plan.predicted.iteration_s;
    ++result_.plans_enumerated;
    if (t < result_.iteration_ignoring_memory_s) {
      result_.iteration_ignoring_memory_s = t;
      result_.launch_counts_ignoring_memory = launch_counts(plan);
    }
    const bool fits = check_memory(costs_, plan).ok();
    if (probe_ != nullptr && probe_->size() == pipeline_.size() &&
        std::equal(pipeline_.begin(), pipeline_.end(), probe_->begin(), same_placement)) {
      result_.probe_enumerated = true;
      result_.probe_fits = fits;
    }
    if (kinds_ != nullptr) score_schedules(plan);
    if (!fits) return;
    ++result_.plans_memory_feasible;
    if (t < result_.iteration_s) {
      result_.feasible = true;
      result_.iteration_s = t;
      result_.placements = pipeline_;
      result_.launch_counts = launch_counts(plan);
    }
  }

  // Every kind on `plan`, simulated; each stage's peak against its devices' memory.
  void score_schedules(const plan::Plan& plan) {
    for (plan::ScheduleKind kind : *kinds_) {
      plan::Plan p = plan;
      if (plan::uses_delta_rule(kind)) p.schedule = kind;  // the plan's own launch counts
      auto low = schedule::lower_plan(p, kind);
      if (!low.ok() || !low->check.ok) continue;
      sim::SimOptions so;
      so.record_spans = false;
      auto sim = sim::simulate(p, low->lowered, so);
      if (!sim.ok()) continue;
      ++joint_.pairs_simulated;
      bool fits = true;
      for (int i = 0; i < p.num_stages(); ++i)
        fits = fits && sim->ranks[i].peak_memory_bytes <= costs_.usable_memory_bytes(p.stages[i].subcluster);
      if (!fits) continue;
      const Seconds t = sim->iteration_s();
      joint_.times.push_back(t);
      if (t < joint_.simulated_s) {
        joint_.feasible = true;
        joint_.simulated_s = t;
        joint_.kind = kind;
        joint_.placements = pipeline_;
      }
    }
  }

  const StageCosts& costs_;
  const SearchOptions& options_;
  const cluster::Cluster& cluster_;
  const std::vector<Placement>* probe_;
  const std::vector<plan::ScheduleKind>* kinds_;
  JointResult joint_;
  std::vector<int> order_;            // position -> subcluster index
  std::vector<Placement> pipeline_;   // stages placed so far, head first
  BruteForceResult result_;
};

}  // namespace

std::vector<MeshShape> meshes_at(const StageCosts& costs, const SearchOptions& options, int sub,
                                 int offset, int free_devices) {
  return shapes_at(costs, options, sub, offset, free_devices, true);
}

std::vector<MeshShape> shapes_at(const StageCosts& costs, const SearchOptions& options, int sub, int offset,
                                 int free_devices, bool even_split) {
  const auto& sc = costs.cluster().subclusters[sub];
  const int dpn = sc.devices_per_node;
  struct Size {
    int devices;
    bool whole_nodes;
  };
  std::vector<Size> sizes;
  // A power-of-two group that stays inside the node holding device `offset`.
  for (int z = 1; z <= dpn; z *= 2)
    if (offset / dpn == (offset + z - 1) / dpn) sizes.push_back({z, false});
  // m whole nodes from a node boundary. One whole node of a power-of-two node is already
  // the largest group above, so it is not listed twice.
  if (offset % dpn == 0)
    for (int m = is_power_of_two(dpn) ? 2 : 1; m * dpn <= sc.num_devices(); ++m)
      sizes.push_back({m * dpn, true});

  std::vector<MeshShape> out;
  for (const Size& s : sizes) {
    if (s.devices > free_devices) continue;
    // tp: a power of two inside one node, dividing the mesh (and the node for whole nodes).
    for (int tp = 1; tp <= dpn; tp *= 2) {
      if (options.max_tp > 0 && tp > options.max_tp) break;
      if (s.devices % tp != 0 || (s.whole_nodes && dpn % tp != 0)) continue;
      const int dp = s.devices / tp;
      if (even_split && (costs.microbatch_size() % dp != 0 || !costs.has(sub, dp, tp))) continue;
      out.push_back({s.devices, dp, tp});
    }
  }
  return out;
}

BruteForceResult brute_force_search(const StageCosts& costs, const SearchOptions& options,
                                    const std::vector<Placement>* probe) {
  return Enumerator(costs, options, probe).run();
}

JointResult brute_force_schedules(const StageCosts& costs, const SearchOptions& options,
                                  const std::vector<plan::ScheduleKind>& kinds) {
  Enumerator e(costs, options, nullptr, &kinds);
  e.run();
  JointResult out = e.joint();
  std::sort(out.times.begin(), out.times.end());
  return out;
}

}  // namespace harp::planner::reference
