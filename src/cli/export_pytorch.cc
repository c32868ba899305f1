// A plan as torch.distributed.pipelining's schedule CSVs and a manifest (export_pytorch.h).
#include "export_pytorch.h"

#include <filesystem>

#include "harp/common/document.h"
#include "harp/plan/rank_layout.h"
#include "harp/schedule/lower_plan.h"
#include "harp/sim/run_report.h"

namespace harp::cli {
namespace {

// The names of the block pieces a layer holds (model::Layer::pieces bits).
Json piece_names(int pieces) {
  static const char* const kNames[] = {"attn_in", "attn_out", "mlp_in", "mlp_out"};
  Json out = Json::array();
  for (int i = 0; i < 4; ++i)
    if (pieces & (1 << i)) out.push_back(kNames[i]);
  return out;
}

const char* layer_kind(model::LayerKind kind) {
  switch (kind) {
    case model::LayerKind::kHead:
      return "embed";
    case model::LayerKind::kTail:
      return "tail";
    default:
      return "block";
  }
}

// One CSV row per stage; `compute_only` keeps F, B, I and W. STEP is never written: it is
// not an action of PyTorch's runtime (the optimizer step follows schedule.step()).
std::string schedule_csv(const schedule::Schedule& s, bool compute_only) {
  std::string text;
  for (const auto& row : s.actions) {
    bool first = true;
    for (const schedule::Action& a : row) {
      if (a.kind == schedule::ActionKind::kStep || (compute_only && !a.is_compute())) continue;
      text += (first ? "" : ",") + schedule::to_string(a);
      first = false;
    }
    text += "\n";
  }
  return text;
}

Json exchanges_json(const plan::RankLayout& l, int stage, int d, int t, int other, bool sending) {
  Json out = Json::array();
  if (other < 0 || other >= l.num_stages()) return out;
  for (const plan::RankLayout::Exchange& e : l.exchanges(stage, d, t, other, sending))
    out.push_back({{"peer", e.peer}, {"first", e.first}, {"count", e.count}});
  return out;
}

}  // namespace

Status export_pytorch_pipelining(const plan::Plan& p, const std::string& plan_file, const model::ModelSpec& model,
                                 const std::string& out_dir, const std::string& shown_dir, std::ostream& out) {
  for (int s = 0; s < p.num_stages(); ++s)
    if (p.stages[s].first_layer < 0)
      return invalid_argument(shown_path(plan_file) + ": stage " + std::to_string(s) +
                              " lists no layers; the export needs each stage's [first, last) layers (plans from "
                              "harp plan have them; add \"layers\" to a hand-written plan)");
  if (p.stages.back().last_layer != model.num_layers())
    return invalid_argument(shown_path(plan_file) + ": the stages cover layers [0, " +
                            std::to_string(p.stages.back().last_layer) + ") but the model has " +
                            std::to_string(model.num_layers()) + "; use the plan's own model (no --model)");
  int world = 0;
  for (const plan::Stage& st : p.stages) world += st.dp * st.tp;
  HARP_ASSIGN_OR_RETURN(plan::RankLayout layout, plan::layout_for(p, world, 0));
  HARP_ASSIGN_OR_RETURN(schedule::LoweredPlan lowered, schedule::lower_plan(p));
  HARP_RETURN_IF_ERROR(lowered.require_drains());

  Json m;
  m["format"] = "harp-pytorch-pipelining";
  m["version"] = 1;
  m["plan"] = plan_file;
  m["strategy"] = p.strategy;
  m["schedule"] = plan::schedule_kind_name(p.schedule);
  m["split_backward"] = plan::splits_backward(p.schedule);
  m["microbatches"] = p.microbatches;
  m["microbatch_size"] = p.microbatch_size;
  m["num_stages"] = p.num_stages();
  m["world_size"] = world;
  m["schedule_csv"] = "schedule.csv";
  m["schedule_csv_format"] = "compute_comms";
  m["compute_only_csv"] = "schedule_compute_only.csv";
  m["model_config"] = model::model_to_json(model);
  Json layers = Json::array();
  for (int i = 0; i < model.num_layers(); ++i) {
    const model::Layer& l = model.layers[i];
    layers.push_back({{"index", i},
                      {"name", l.name},
                      {"kind", layer_kind(l.kind)},
                      {"block", l.block},
                      {"pieces", piece_names(l.pieces)},
                      {"output_shape", l.output_shape}});
  }
  m["layers"] = layers;
  Json stages = Json::array();
  for (int s = 0; s < p.num_stages(); ++s) {
    const plan::Stage& st = p.stages[s];
    Json firsts = Json::array();
    for (int d = 0; d <= st.dp; ++d) firsts.push_back(layout.first_sample(s, d));
    stages.push_back({{"stage", s},
                      {"layers", {st.first_layer, st.last_layer}},
                      {"dp", st.dp},
                      {"tp", st.tp},
                      {"sample_firsts", firsts},
                      {"ranks", layout.stage_ranks[s]},
                      {"devices", st.devices},
                      {"device", st.device},
                      {"launch_count", lowered.launch_counts[s]},
                      {"zero", st.zero},
                      {"recompute", recompute_name(st.recompute)},
                      {"fwd_s", st.fwd_s},
                      {"bwd_s", st.bwd_s}});
  }
  m["stages"] = stages;
  // Every rank from the one layout: placing it at (s, d, t) is what layout_for(p, world, r)
  // would compute for its rank r, without building the layout again per rank.
  std::vector<Json> ranks(static_cast<size_t>(world));
  plan::RankLayout& l = layout;
  for (int s = 0; s < p.num_stages(); ++s)
    for (int d = 0; d < p.stages[s].dp; ++d)
      for (int t = 0; t < p.stages[s].tp; ++t) {
        const int r = l.rank_of(s, d, t);
        l.rank = r, l.stage = s, l.dp_rank = d, l.tp_rank = t;
        ranks[static_cast<size_t>(r)] =
            Json{{"rank", r},
                 {"stage", s},
                 {"dp_rank", d},
                 {"tp_rank", t},
                 {"device", l.rank_device[r]},
                 {"emulated_slowdown", d < static_cast<int>(p.stages[s].replica_slowdowns.size())
                                           ? p.stages[s].replica_slowdowns[d]
                                           : p.stages[s].emulated_slowdown},
                 {"samples", {l.first_sample(s, d), l.samples_of(s, d)}},
                 {"dp_group", l.dp_group()},
                 {"tp_group", l.tp_group()},
                 {"recv_fwd", exchanges_json(l, s, d, t, s - 1, false)},
                 {"send_fwd", exchanges_json(l, s, d, t, s + 1, true)},
                 {"recv_bwd", exchanges_json(l, s, d, t, s + 1, false)},
                 {"send_bwd", exchanges_json(l, s, d, t, s - 1, true)}};
      }
  m["ranks"] = ranks;
  const sim::PredictionReport predicted = sim::predict_against_measured(p, 0);
  m["predicted_s"] = predicted.predicted_s;
  m["closed_form_s"] = predicted.closed_form_s;
  m["cost_source"] = p.cost_source;
  m["emulated_stages"] = predicted.emulated_stages;

  HARP_RETURN_IF_ERROR(write_text_file_atomic(out_dir + "/schedule.csv", schedule_csv(lowered.lowered, false)));
  HARP_RETURN_IF_ERROR(
      write_text_file_atomic(out_dir + "/schedule_compute_only.csv", schedule_csv(lowered.lowered, true)));
  HARP_RETURN_IF_ERROR(write_text_file_atomic(out_dir + "/manifest.json", m.dump(1) + "\n"));
  size_t written = 0;  // without STEP
  for (const auto& row : lowered.lowered.actions)
    for (const schedule::Action& a : row) written += a.kind != schedule::ActionKind::kStep;
  out << "wrote " << shown_dir << "/manifest.json, schedule.csv and schedule_compute_only.csv (" << p.num_stages()
      << " stages, " << world << " ranks, " << plan::schedule_kind_name(p.schedule) << ", " << written
      << " actions); run it with torchrun "
      << (world <= 16 ? "--nproc-per-node " + std::to_string(world)
                      : "(" + std::to_string(world) + " ranks in all: --nnodes x --nproc-per-node)")
      << " examples/pytorch/train_pipelined.py --export " << shown_dir << "\n";
  return Status();
}

}  // namespace harp::cli
