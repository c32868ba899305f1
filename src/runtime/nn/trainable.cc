// What the runtime's layers can train (see trainable.h).
#include "harp/runtime/nn/trainable.h"

#include <string>

#include "harp/common/document.h"
#include "harp/runtime/nn/gpt.h"

namespace harp::runtime {

Status check_trainable(const model::ModelSpec& model) {
  if (model.family == "gpt" || model.family == "llama") return Status();
  return failed_precondition("model " + model.gpt.name + " is of family " + model.family +
                             ", which has no runtime layers (gpt, llama); it can be planned and simulated but "
                             "not trained or profiled");
}

Status check_plan_matches_model(const plan::Plan& plan, const model::ModelSpec& model) {
  HARP_RETURN_IF_ERROR(check_trainable(model));
  const int L = model.num_layers();
  int expect = 0;
  for (int i = 0; i < plan.num_stages(); ++i) {
    const auto& s = plan.stages[i];
    if (s.first_layer < 0)
      return failed_precondition("stage " + std::to_string(i) +
                                 " has no `layers`: a plan to train needs layer ranges (make it with harp plan)");
    if (s.first_layer != expect)
      return failed_precondition("stage " + std::to_string(i) + " starts at layer " + std::to_string(s.first_layer) +
                                 " but the previous stage ends at " + std::to_string(expect));
    expect = s.last_layer;
  }
  if (expect != L)
    return failed_precondition("the plan covers layers [0, " + std::to_string(expect) + ") but model " +
                               model.gpt.name + " (k = " + std::to_string(model.gpt.granularity) + ") has " +
                               std::to_string(L) + " layers; use the model and granularity the plan was made for");
  for (int i = 0; i + 1 < plan.num_stages(); ++i) {
    const auto& want = model.layers[plan.stages[i].last_layer - 1].output_shape;
    if (!plan.stages[i].cut_shape.empty() && plan.stages[i].cut_shape != want)
      return failed_precondition("stage " + std::to_string(i) + " sends a tensor of shape " +
                                 Json(plan.stages[i].cut_shape).dump() + " per sample but the model's layer " +
                                 std::to_string(plan.stages[i].last_layer - 1) + " outputs " + Json(want).dump() +
                                 "; re-plan for this model");
  }
  const auto& g = model.gpt;
  const int kv_heads = g.family == "llama" ? g.kv_heads : g.heads;
  for (int i = 0; i < plan.num_stages(); ++i) {
    const int tp = plan.stages[i].tp;
    if (tp <= 1) continue;
    // The heads, key/value heads and ffn columns split evenly; every rank keeps some
    // vocabulary rows.
    const bool fits = g.heads % tp == 0 && kv_heads % tp == 0 && g.ffn_hidden % tp == 0 &&
                      vocab_rows(g.vocab, tp, tp - 1).second > vocab_rows(g.vocab, tp, tp - 1).first;
    if (!fits)
      return failed_precondition("stage " + std::to_string(i) + " has tp = " + std::to_string(tp) +
                                 ", which must divide the model's heads (" + std::to_string(g.heads) +
                                 "), key/value heads (" + std::to_string(kv_heads) + ") and ffn_hidden (" +
                                 std::to_string(g.ffn_hidden) + "); re-plan with a --max-tp that does");
  }
  if (!plan.model_fingerprint.empty() && plan.model_fingerprint != model.fingerprint())
    return failed_precondition("the plan was made for another model (fingerprint " + plan.model_fingerprint +
                               ", this model " + model.fingerprint() + "); re-plan or pass the plan's model");
  return Status();
}

}  // namespace harp::runtime
