"""How well a roofline with fitted efficiencies predicts Sailor's measured blocks, held out.

For each GPU, a block's forward + backward time is modelled as a roofline of two kinds of
work, summed:
    t = F / (P x e) + k x S / W
with F = 3 x B x s x (2 x params + 4 x s x h) / T its FLOPs (matmuls and attention, every
key counted), S = B x heads x s^2 x 4 / T the bytes of one float32 pass over the attention
scores (the unfused softmax and its masks are memory bound), W the GPU's memory bandwidth,
and P the peak a float32 run computes at:
TF32 where the GPU has it (Sailor's container lets cuBLAS use it; bench/sailor_throughput.py),
float32 otherwise. Per (model, GPU) the rows of the smallest tensor-parallel degree measured
are used; where that is above 1 the time includes Megatron's all-reduces, which the model
leaves out.

Leave one model out: fit e (the compute efficiency) and k (score passes) on the other
models' rows by least squares of the relative error (e alone, k = 0, where the two do not
separate or one comes out negative), predict the
held-out model's rows, report the median and worst relative error per GPU. "Before" is the
analytic model's old default: 50% of the fp16/bf16 tensor peak for every dtype. "Model" is
what the cost model prices a float32 run at now (cost/efficiency.h: 91% of the plain float32
peak, this fit's e on V100's rows of all three models, without the score passes: HARP's
runtime fuses attention), for GPUs that ran plain float32 (no TF32).

Writes OUT/sailor_fit.csv and OUT/sailor_fit.svg (worst held-out error per GPU, before and
after); prints the table. No GPU or build needed.
"""
import os

import numpy as np

from bench_util import bar_chart, write_csv
from sailor_throughput import MODELS, PEAKS, PROFILES, out_dir, rows_of

# The cost model's float32 efficiency (src/cost/efficiency.cc, kFloat32Efficiency).
MODEL_FLOAT32_EFFICIENCY = 0.91

# The fp16/bf16 dense tensor peaks harp's catalogue gives these GPUs (cluster/device.cc).
TENSOR_PEAK = {"V100-16": 125.0, "A100-40": 312.0, "A100-80": 312.0, "GH-96": 989.0, "RTX-3090": 71.0}
# Memory bandwidth, GB/s (datasheets; GH-96 is a GH200's HBM3).
BANDWIDTH = {"V100-16": 900.0, "A100-40": 1555.0, "A100-80": 2039.0, "GH-96": 4000.0, "RTX-3090": 936.0,
             "RTX-2080": 448.0, "Titan-RTX": 672.0}
HEADS = {"OPT-350": 16, "GPT-Neo-2.7": 20, "LLAMA-3-8": 32}


def samples(gpu):
    """Per model: (F_gemm / P, F_attn / P, measured s) of the smallest tp measured."""
    fp32, tf32 = PEAKS[gpu]
    peak = (tf32 or fp32) * 1e12
    out = {}
    for model, (s, h) in MODELS.items():
        rows = rows_of(model, gpu) if os.path.isdir(os.path.join(PROFILES, model, gpu)) else []
        if not rows:
            continue
        tp = min(r["tp"] for r in rows)
        pts = []
        for r in rows:
            if r["tp"] != tp:
                continue
            b, params = r["microbatch"], r["block_params_m"] * 1e6
            flops = 3 * b * s * (2 * params + 4 * s * h) / tp
            # One float32 pass over every head's s x s scores (the unfused softmax reads and
            # writes them several times in forward and backward: the fit finds how many).
            scores = b * HEADS[model] * s * s * 4 / tp
            pts.append((flops / peak, scores / (BANDWIDTH[gpu] * 1e9), r["block_ms"] * 1e-3, r["microbatch"], tp,
                        flops))
        out[model] = pts
    return out


def fit(points):
    """(e, k): t = F/P / e + k x S/W, least squares of the relative error."""
    a = np.array([[g / t, at / t] for g, at, t, *_ in points])
    y = np.ones(len(points))
    x, *_ = np.linalg.lstsq(a, y, rcond=None)
    if len({round(at / g, 6) for g, at, *_ in points}) > 1 and (x > 0).all():
        return 1 / x[0], x[1]
    inv = np.sum(a[:, 0]) / np.sum(a[:, 0] ** 2)  # compute alone
    return 1 / inv, 0.0


def main():
    out = out_dir()
    rows, bars = [], []
    print("%-9s %-12s %-6s %-22s %-18s %-18s %-18s" % ("GPU", "held out", "rows", "fitted e, score passes",
                                                       "before: med/worst", "after: med/worst", "model: med/worst"))
    for gpu in sorted(PEAKS):
        data = samples(gpu)
        if len(data) < 2:
            continue
        worst_before = worst_after = worst_model = 0.0
        for held in data:
            train = [p for m, pts in data.items() if m != held for p in pts]
            e_g, k = fit(train)
            after = [abs((g / e_g + k * at) / t - 1) for g, at, t, *_ in data[held]]
            before = ([abs(flops / (TENSOR_PEAK[gpu] * 1e12 * 0.5) / t - 1) for *_, t, _b, _tp, flops in data[held]]
                      if gpu in TENSOR_PEAK else [])
            fp32, tf32 = PEAKS[gpu]
            model = ([abs(flops / (fp32 * 1e12 * MODEL_FLOAT32_EFFICIENCY) / t - 1)
                      for *_, t, _b, _tp, flops in data[held]] if not tf32 else [])
            row = {"gpu": gpu, "held_out": held, "rows": len(after), "tp": data[held][0][4],
                   "efficiency": round(e_g, 3), "score_passes": round(k, 1),
                   "after_median": round(float(np.median(after)), 3), "after_worst": round(max(after), 3),
                   "before_median": round(float(np.median(before)), 3) if before else "",
                   "before_worst": round(max(before), 3) if before else "",
                   "model_median": round(float(np.median(model)), 3) if model else "",
                   "model_worst": round(max(model), 3) if model else ""}
            rows.append(row)
            worst_after = max(worst_after, row["after_worst"])
            worst_before = max(worst_before, row["before_worst"] or 0)
            worst_model = max(worst_model, row["model_worst"] or 0)
            print("%-9s %-12s %-6d %-22s %-18s %-18s %-18s" % (
                gpu, held, len(after), "%.3f, %.1f" % (e_g, k),
                "%.0f%% / %.0f%%" % (100 * row["before_median"], 100 * row["before_worst"]) if before else "-",
                "%.0f%% / %.0f%%" % (100 * row["after_median"], 100 * row["after_worst"]),
                "%.0f%% / %.0f%%" % (100 * row["model_median"], 100 * row["model_worst"]) if model else "-"))
        if gpu in TENSOR_PEAK:
            bars.append(("%s before (50%% of the bf16 peak)" % gpu, 100 * worst_before, "#c44e52"))
        bars.append(("%s after (fitted, held out)" % gpu, 100 * worst_after, "#4c72b0"))
        if worst_model > 0:
            bars.append(("%s cost model's float32 (91%% of the fp32 peak)" % gpu, 100 * worst_model, "#55a868"))
    write_csv(os.path.join(out, "sailor_fit.csv"), rows)
    bar_chart(os.path.join(out, "sailor_fit.svg"),
              "Worst held-out error (%) of a block's time per GPU: today's defaults vs efficiencies fitted without "
              "that model", bars)
    print("wrote %s/sailor_fit.csv and .svg" % out)


if __name__ == "__main__":
    main()
