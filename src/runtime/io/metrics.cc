// Metrics lines, progress lines and the measured plan (see metrics.h).
#include "harp/runtime/io/metrics.h"

#include <chrono>
#include <cstdio>
#include <set>

#include "harp/common/document.h"
#include "harp/common/format.h"
#include "harp/model/utilisation.h"
#include "harp/launch/progress.h"
#include "harp/plan/closed_form.h"

namespace harp::runtime {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

StatusOr<MetricsLog> MetricsLog::open(const std::string& out_dir, bool writer, bool append) {
  MetricsLog m;
  m.writer_ = writer;
  if (!writer) return m;
  const std::string path = out_dir + "/metrics.jsonl";
  m.file_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!m.file_) return io_error(shown_path(path) + ": cannot open for writing");
  return m;
}

void MetricsLog::write(const StepMetrics& m, bool progress, std::ostream& log) {
  if (!writer_) return;
  const double tokens_per_s = m.tokens / m.iteration_s;
  Json line = {{"step", m.step},
               {"loss", m.loss},
               {"grad_norm", m.grad_norm},
               {"iteration_s", m.iteration_s},
               {"tokens_per_s", tokens_per_s},
               {"tflops", m.flops / m.iteration_s / 1e12},
               {"lr", m.lr},
               {"busy_fraction", m.busy_fraction},
               {launch::kProgressWallKey, unix_now()}};
  if (!m.link_s.empty()) line["link_s"] = m.link_s;
  if (!m.link_probes.empty()) {
    Json probes = Json::array();
    for (const LinkProbe& p : m.link_probes)
      probes.push_back({{"a", p.a}, {"b", p.b}, {"bytes", p.bytes}, {"transit_s", p.transit_s}});
    line["link_probes"] = probes;
  }
  if (!m.stage_mfu.empty()) {
    line["mfu"] = m.mfu;
    line["stage_mfu"] = m.stage_mfu;
  }
  if (m.resumed_from >= 0) line[launch::kProgressResumedKey] = m.resumed_from;
  if (m.stopping_at >= 0) line[launch::kProgressStoppedKey] = m.stopping_at;
  if (m.loss_scale > 0) {
    line["loss_scale"] = m.loss_scale;
    line["skipped"] = m.skipped;
  }
  file_ << line.dump() << "\n" << std::flush;
  if (!progress) return;
  char buf[320];
  const std::string mfu = m.stage_mfu.empty() ? std::string() : fmt("  MFU %.1f%%", 100 * m.mfu);
  std::snprintf(buf, sizeof buf, "step %d/%d  loss %.4f  %.1f ms/step  %.0f tokens/s%s%s\n", m.step + 1,
                m.total_steps, m.loss, m.iteration_s * 1e3, tokens_per_s, mfu.c_str(),
                m.skipped ? "  (update skipped: the scaled gradients overflowed; loss scale halved)" : "");
  log << buf << std::flush;
}

void MetricsLog::write_eval(int steps_done, double val_loss, bool progress, std::ostream& log) {
  if (!writer_) return;
  file_ << Json({{"eval_after_steps", steps_done}, {"val_loss", val_loss}}).dump() << "\n" << std::flush;
  if (!progress) return;
  char buf[120];
  std::snprintf(buf, sizeof buf, "validation after %d steps: loss %.4f\n", steps_done, val_loss);
  log << buf << std::flush;
}

Utilisation plan_utilisation(const model::ModelSpec& model, const plan::Plan& plan, double iteration_s) {
  Utilisation u;
  double flops = 0, peak_flops = 0;
  const double samples = static_cast<double>(plan.microbatches) * plan.microbatch_size;
  for (const plan::Stage& s : plan.stages) {
    if (s.peak_tflops <= 0 || s.first_layer < 0) return Utilisation();
    const int devices = s.dp * s.tp;
    const double f = model::model_flops(model, s.first_layer, s.last_layer, samples);
    u.stages.push_back(model::mfu(f, iteration_s, devices, s.peak_tflops));
    flops += f;
    peak_flops += devices * s.peak_tflops;
  }
  u.overall = model::mfu(flops, iteration_s, 1, peak_flops);
  return u;
}

void MetricsLog::write_sample(int steps_done, const std::string& text) {
  if (!writer_) return;
  // Invalid UTF-8 (a byte-level sample cut inside a character) is replaced, not refused.
  file_ << Json({{"sample_after_steps", steps_done}, {"sample", text}}).dump(-1, ' ', false, Json::error_handler_t::replace)
        << "\n" << std::flush;
}

void MetricsLog::write_drift(const Drift& d) {
  if (!writer_) return;
  file_ << Json({{launch::kProgressDriftKey, d.step + 1},
                 {"stage", d.stage},
                 {"link", d.link},
                 {"ratio", d.ratio},
                 {"baseline_s", d.baseline_s},
                 {"measured_s", d.measured_s},
                 {"stage_ratios", d.stage_ratios},
                 {"stage_measured_s", d.stage_measured_s},
                 {"stage_baseline_s", d.stage_baseline_s},
                 {"link_ratios", d.link_ratios},
                 {"link_measured_s", d.link_measured_s},
                 {"link_baseline_s", d.link_baseline_s},
                 {launch::kProgressWallKey, unix_now()}})
               .dump()
        << "\n" << std::flush;
}

std::vector<LinkProbe> idle_links(const model::ModelSpec& model, const plan::Plan& plan) {
  std::set<std::pair<std::string, std::string>> joined, probed;
  auto key = [](const std::string& a, const std::string& b) { return a < b ? std::pair{a, b} : std::pair{b, a}; };
  const int S = plan.num_stages();
  for (int s = 0; s + 1 < S; ++s) joined.insert(key(plan.stages[s].subcluster_name, plan.stages[s + 1].subcluster_name));
  std::vector<LinkProbe> out;
  for (int i = 0; i < S; ++i)
    for (int j = i + 2; j < S; ++j) {
      const std::string &a = plan.stages[i].subcluster_name, &b = plan.stages[j].subcluster_name;
      if (a.empty() || b.empty() || a == b || joined.count(key(a, b)) || !probed.insert(key(a, b)).second) continue;
      const double bytes = plan.stages[i].comm_bytes > 0
                               ? static_cast<double>(plan.stages[i].comm_bytes)
                               : 4.0 * plan.microbatch_size * model.gpt.seq_len * model.gpt.hidden;
      out.push_back({i, j, a, b, bytes, 0.0});
    }
  return out;
}

plan::Plan measured_plan(const plan::Plan& plan, const std::vector<double>& fwd_s, const std::vector<double>& bwd_s,
                         const std::vector<std::vector<double>>& replica_compute_s) {
  plan::Plan measured = plan;
  for (int s = 0; s < measured.num_stages(); ++s) {
    auto& st = measured.stages[s];
    // The weight gradients' part keeps its predicted share of the backward: the predicted
    // seconds could exceed a measured backward, which no plan may hold.
    if (st.bwd_s > 0) st.bwd_weight_s *= bwd_s[s] / st.bwd_s;
    st.fwd_s = fwd_s[s];
    st.bwd_s = bwd_s[s];
    st.comm_s = st.comm_latency_s = 0;  // loopback: microseconds
    st.allreduce_s = st.optimizer_s = 0;
    st.fixed_fwd_s = st.fixed_bwd_s = st.fixed_step_s = 0;  // a measurement has no such part
    if (st.mixed() && s < static_cast<int>(replica_compute_s.size()) &&
        replica_compute_s[s].size() == st.replica_compute_s.size())
      st.replica_compute_s.assign(replica_compute_s[s].begin(), replica_compute_s[s].end());
    st.cost_source = "measured";
  }
  measured.predicted = plan::closed_form(measured);
  return measured;
}

}  // namespace harp::runtime
