// Model FLOPs utilisation (MFU), as Megatron-LM and torchtitan report it: the FLOPs the
// model needs per step, over the time the step took, against the devices' declared peak.
//
// The model's FLOPs per sample are the spec's (model/model_spec.h): every matrix multiply
// on parameters (2 FLOPs per parameter and token: the attention, MLP and LM-head
// projections; the embedding lookup counts none) plus the attention core (q kᵀ and the
// weighted sum of v: 4 s h per token and block, causal masking not halving it), times 3
// for the backward (one forward, two backward products): 6N + 12 L h s per token, what
// torchtitan's get_num_flop_per_token counts. Recomputation is not counted: it is work
// the hardware does but the model does not need (Megatron's "model" FLOPs, not "hardware"
// FLOPs), so a stage that recomputes shows a lower MFU for the same speed.
#pragma once

#include "harp/model/model_spec.h"

namespace harp::model {

// The model FLOPs of layers [first, last) for `samples` samples, forward and backward.
double model_flops(const ModelSpec& model, int first, int last, double samples);

// flops / (seconds x devices x peak): a fraction (0.42 is 42%); 0 when the peak is unknown
// (peak_tflops <= 0) or seconds <= 0.
double mfu(double flops, double seconds, int devices, double peak_tflops);

}  // namespace harp::model
