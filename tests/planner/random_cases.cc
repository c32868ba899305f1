// The random small problems (random_cases.h).
#include "random_cases.h"

namespace harp::planner::testutil {

std::string describe_case(const RandomCase& rc) {
  std::ostringstream s;
  s.precision(17);
  s << "cluster:\n" << rc.cluster_yaml << "microbatch_size " << rc.microbatch_size << "\n";
  for (size_t i = 0; i < rc.layers.size(); ++i)
    s << "layer " << i << ": param " << rc.layers[i].param_bytes << " act "
      << rc.layers[i].activation_bytes << " out " << rc.layers[i].output_bytes << " block "
      << rc.layers[i].block << " in " << rc.layers[i].input_bytes << " scores "
      << rc.layers[i].attention_score_bytes << " attention " << rc.layers[i].attention_flop_fraction << "\n";
  for (const auto& [dev, by_samples] : rc.times)
    for (const auto& [samples, t] : by_samples) {
      s << "times " << dev << " samples " << samples << ":";
      for (size_t i = 0; i < t.fwd_s.size(); ++i) s << " (" << t.fwd_s[i] << ", " << t.bwd_s[i] << ")";
      s << "\n";
    }
  const SearchOptions& o = rc.options;
  s << "options: B " << o.microbatches << " allow_idle " << o.allow_idle_devices << " fixed_order "
    << o.fixed_order << " schedule " << plan::schedule_kind_name(o.schedule) << " max_tp " << o.max_tp
    << " recompute";
  for (Recompute r : o.recompute) s << " " << recompute_name(r);
  s << " zero";
  for (int z : o.zero) s << " " << z;
  s << " (optimizer " << rc.config.optimizer_bytes_per_param_byte << ", gradient "
    << rc.config.gradient_bytes_per_param_byte << ", parameter " << rc.config.parameter_bytes_per_param_byte
    << " bytes per param byte)\n";
  return s.str();
}

// The memory of the user devices SmallA/SmallB is sized from the model itself (a
// fraction of its state plus a few microbatches of activations), so that it binds for
// some placements and not others.
RandomCase make_random_case(std::uint32_t seed, bool interplay_only, bool recompute, bool zero, bool mixed) {
  std::mt19937 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return uni(0, 1) < p; };

  RandomCase rc;
  // Regimes: roomy, tight memory, slow links, both (the interplay of δ and memory).
  const int regime = interplay_only ? 3
                     : recompute    ? std::discrete_distribution<int>({0, 1, 0, 1})(rng)
                                    : std::discrete_distribution<int>({2, 2, 2, 4})(rng);
  const bool tight_memory = regime == 1 || regime == 3;
  const bool slow_links = regime == 2 || regime == 3;

  const int C = 1 + std::discrete_distribution<int>({interplay_only || mixed ? 0.0 : 1.0, 3.0, recompute ? 0.0 : 3.0})(rng);
  // Three subclusters in every order with idle devices make the most plans: one layer
  // fewer keeps the brute force's worst case near a hundred thousand plans. Every stage's
  // recomputation mode multiplies them again: at most 2 subclusters and 5 layers then.
  const int L = pick(2, recompute ? 5 : C == 3 ? 6 : 7);
  // dp must divide the microbatch: with 1 sample every mesh is one device, and with
  // every device used most clusters cannot be covered, so 1 is drawn less often.
  rc.microbatch_size = mixed ? pick(2, 4) : std::vector<int>{1, 2, 2, 4, 4}[pick(0, 4)];
  double model_state = 0, model_act = 0;
  for (int i = 0; i < L; ++i) {
    StageCosts::LayerBytes b;
    b.param_bytes = uni(2, 48) * kMiB;
    b.activation_bytes = uni(1, 48) * kMiB / rc.microbatch_size;
    b.output_bytes = uni(0.02, 4) * 1e6 / rc.microbatch_size;
    rc.layers.push_back(b);
    model_state += cost::CostConfig{}.state_bytes_per_param_byte * b.param_bytes;
    model_act += b.activation_bytes * rc.microbatch_size;
  }
  // Per-layer work shared by every device type, scaled by a per-type speed and a
  // sublinear per-sample curve, with a little noise so no table is exactly proportional.
  std::vector<double> work(L), bwd_factor(L);
  double model_s = 0, cut_bytes = 0;  // whole model, one microbatch, speed 1; mean cut
  for (int i = 0; i < L; ++i) {
    work[i] = uni(1e-3, 10e-3);
    bwd_factor[i] = uni(1.5, 2.5);
    model_s += work[i] * (1 + bwd_factor[i]);
    cut_bytes += rc.layers[i].output_bytes * rc.microbatch_size / L;
  }
  auto small_memory_gib = [&]() {
    const double f = tight_memory ? uni(0.2, 0.9) : uni(0.8, 3);
    const double need = cost::CostConfig{}.workspace_bytes + f * (model_state + 3 * model_act);
    return need / (1 - cost::CostConfig{}.memory_reserve_fraction) / kGiB;
  };

  // A slow link makes a mean cut cost 2.5-30% of the whole model's time on one device:
  // for two to four stages that is the band of δ = 2 and 3, c >= P/10.
  auto slow_gbps = [&]() { return cut_bytes / (uni(0.025, 0.3) * model_s) * 8 / 1e9; };

  const std::vector<std::string> kinds =
      tight_memory ? std::vector<std::string>{"SmallA", "SmallB"}
                   : std::vector<std::string>{"V100-32GB", "A100-40GB", "T4", "SmallA", "SmallB"};
  std::ostringstream y;
  y.precision(9);
  y << "version: 1\nname: random-" << seed << "\ndevices:\n";
  y << "  - {name: SmallA, peak_tflops: 50, memory_gib: " << small_memory_gib()
    << ", memory_bandwidth_gbs: " << uni(200, 900) << "}\n";
  y << "  - {name: SmallB, peak_tflops: 80, memory_gib: " << small_memory_gib()
    << ", memory_bandwidth_gbs: " << uni(200, 900) << "}\n";
  y << "subclusters:\n";
  std::vector<std::string> used_kinds;
  for (int c = 0; c < C; ++c) {
    const std::string kind = kinds[pick(0, static_cast<int>(kinds.size()) - 1)];
    used_kinds.push_back(kind);
    // Up to 3 nodes when nodes are small: whole-node meshes of 3 nodes, and of 2 or 3
    // single-device nodes.
    const int dpn = pick(1, 4);
    const int nodes = pick(1, dpn <= 2 ? 3 : 2);
    // The δ rule applies to every link that leaves a node, so with slow links the
    // network between nodes of a subcluster is sometimes slow too.
    const double inter_gbps = slow_links && chance(0.5) ? slow_gbps() : uni(10, 100);
    y << "  - {name: s" << c << ", device: " << kind << ", nodes: " << nodes
      << ", devices_per_node: " << dpn << ",\n     intra_node: {bandwidth_gbps: "
      << uni(50, 300) << ", latency_us: " << uni(2, 20) << "},\n     inter_node: {bandwidth_gbps: "
      << inter_gbps << ", latency_us: " << uni(5, 50) << "}}\n";
  }
  if (C > 1) {
    y << "links:\n";
    auto link = [&](int a, int b) {
      y << "  - {between: [s" << a << ", s" << b << "], bandwidth_gbps: "
        << (slow_links ? slow_gbps() : uni(1, 20)) << ", latency_ms: "
        << (slow_links ? uni(0.01, 0.3) : uni(0.05, 2)) << "}\n";
    };
    for (int c = 0; c + 1 < C; ++c) link(c, c + 1);
    // Sometimes the ends are linked too, so that permuted orders and skipped
    // subclusters become possible.
    if (C == 3 && chance(0.5)) link(0, 2);
  }
  rc.cluster_yaml = y.str();

  std::sort(used_kinds.begin(), used_kinds.end());
  used_kinds.erase(std::unique(used_kinds.begin(), used_kinds.end()), used_kinds.end());
  for (const std::string& kind : used_kinds) {
    const double speed = uni(0.3, 3);
    const double alpha = uni(0.6, 1.0);
    // Mixed stages' replicas take any share: times for every sample count then.
    for (int samples = 1; samples <= rc.microbatch_size; samples = mixed ? samples + 1 : samples * 2) {
      StageCosts::LayerTimes t;
      const double scale = speed * std::pow(static_cast<double>(samples) / rc.microbatch_size, alpha);
      for (int i = 0; i < L; ++i) {
        t.fwd_s.push_back(work[i] * scale * uni(0.9, 1.1));
        t.bwd_s.push_back(t.fwd_s.back() * bwd_factor[i]);
      }
      rc.times[kind][samples] = t;
    }
  }
  // Sometimes drop one entry so that has() removes some shapes (or a whole subcluster).
  if (chance(0.15)) {
    auto& by_samples = rc.times[used_kinds[pick(0, static_cast<int>(used_kinds.size()) - 1)]];
    auto it = by_samples.begin();
    std::advance(it, pick(0, static_cast<int>(by_samples.size()) - 1));
    by_samples.erase(it);
  }

  // B < 3 clamps every launch count to at most 2, hiding δ; keep it to one case in ten.
  rc.options.microbatches = chance(0.1) ? pick(1, 2) : pick(3, 12);
  rc.options.allow_idle_devices = !mixed && chance(0.6);
  rc.options.mixed_stages = mixed;
  rc.options.fixed_order = C == 1 || chance(0.5);
  rc.options.schedule = chance(0.8) ? plan::ScheduleKind::kHarp1F1B : plan::ScheduleKind::k1F1B;
  if (recompute) {
    // Blocks of 1-3 consecutive layers; the first and last layer are sometimes outside
    // any block (the embedding and the LM head).
    int block = 0;
    for (int i = 0; i < L;) {
      const int run = pick(1, 3);
      const bool outside = (i == 0 || i + run >= L) && chance(0.4);
      for (int j = i; j < std::min(L, i + run); ++j) {
        StageCosts::LayerBytes& b = rc.layers[j];
        b.block = outside ? -1 : block;
        b.input_bytes = uni(0.02, 0.4) * b.activation_bytes;
        if (chance(0.6)) {
          b.attention_score_bytes = uni(0.2, 0.8) * b.activation_bytes;
          b.attention_flop_fraction = uni(0.05, 0.5);
        }
      }
      block += outside ? 0 : 1;
      i += run;
    }
    const int policy = pick(0, 5);
    rc.options.recompute = policy == 0   ? std::vector<Recompute>{Recompute::kFull}
                           : policy == 1 ? std::vector<Recompute>{Recompute::kSelective}
                                         : std::vector<Recompute>{Recompute::kNone, Recompute::kSelective,
                                                                  Recompute::kFull};
  }
  if (zero) {
    // Sharded optimizer state: forced or chosen per stage, with an all-gather of up to 4x
    // the gradients' bytes, so that sharding may cost time where it saves memory.
    const int policy = pick(0, 2);
    rc.options.zero = policy == 0 ? std::vector<int>{1} : policy == 1 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2};
    rc.config.gradient_bytes_per_param_byte = pick(1, 2);
    rc.config.parameter_bytes_per_param_byte = pick(1, 4);
    rc.config.optimizer_bytes_per_param_byte = uni(2, 8);
  }
  return rc;
}

}  // namespace harp::planner::testutil
