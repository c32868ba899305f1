// `harp export --plan PLAN --to pytorch-pipelining --output DIR`: a plan as what PyTorch's
// own pipeline runtime (torch.distributed.pipelining's _PipelineScheduleRuntime) reads.
//
//   DIR/schedule.csv               one row per stage, the lowered action list in PyTorch's
//                                  "compute_comms" CSV form (2F5, 2SEND_F5, 3RECV_B4, ...,
//                                  2REDUCE_GRAD); STEP is left out (the optimizer step
//                                  follows schedule.step() in PyTorch code)
//   DIR/schedule_compute_only.csv  F and B (I and W) only, for PyTorch's own lowering
//   DIR/manifest.json              written last: the model, the layer sequence and each
//                                  stage's [first, last) layers, every rank's stage, replica,
//                                  samples, groups and sample exchanges, the prediction
//
// One owner: the lists come from schedule::lower_plan and the ranks from
// plan::layout_for, as `harp train` runs them (docs/pytorch.md).
#pragma once

#include <ostream>
#include <string>

#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"

namespace harp::cli {

// `p.schedule` is the schedule exported (harp train --schedule sets it the same way).
// FailedPrecondition when the schedule does not drain or the plan's layout is invalid.
// Writes into `out_dir` (a staging folder, common/output_folder.h); `shown_dir` is the
// folder the user named, which the report line names.
Status export_pytorch_pipelining(const plan::Plan& p, const std::string& plan_file, const model::ModelSpec& model,
                                 const std::string& out_dir, const std::string& shown_dir, std::ostream& out);

}  // namespace harp::cli
