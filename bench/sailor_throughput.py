"""What Sailor's measured GPU profiles are: the throughput each measured block reached.

Reads examples/profiles/sailor/MODEL/GPU/mbs{B}_tmp{T}.json and, for every (model, GPU,
B, T), divides a transformer block's forward + backward FLOPs by its measured time (the
median block of the file). The FLOPs come from the profile's own parameter counts (a
block's float32 parameter bytes / 4 x T): 3 x B x s x (2 x params + 4 x s x h), every key
counted as harp's model counts them. Beside each, the GPU's float32 peak and its TF32
tensor-core peak (datasheets; V100 and Turing have no TF32). A block above the float32
peak cannot have run plain float32 FMAs: its matmuls ran on tensor cores in TF32.

Writes OUT/sailor_throughput.csv (every file) and OUT/sailor_throughput.svg (the best
configuration of each model and GPU), and prints the summary. No GPU or build needed.
"""
import argparse
import glob
import json
import os
import re

from bench_util import ROOT, bar_chart, write_csv

PROFILES = os.path.join(ROOT, "examples", "profiles", "sailor")
# Sequence length and hidden size of each profiled model (Sailor's profile_all.py).
MODELS = {"OPT-350": (2048, 1024), "GPT-Neo-2.7": (2048, 2560), "LLAMA-3-8": (8192, 4096)}
# Dense peaks, TFLOP/s: (float32 FMA, TF32 tensor core or None). NVIDIA datasheets: V100
# SXM2 15.7; A100 19.5 / 156; GH200 (H100) 67 / 494; RTX 3090 35.6 / 35.6; RTX 2080 10.1;
# Titan RTX 16.3.
PEAKS = {"V100-16": (15.7, None), "A100-40": (19.5, 156.0), "A100-80": (19.5, 156.0), "GH-96": (67.0, 494.0),
         "RTX-3090": (35.6, 35.6), "RTX-2080": (10.1, None), "Titan-RTX": (16.3, None)}


def rows_of(model, gpu):
    s, h = MODELS[model]
    fp32, tf32 = PEAKS[gpu]
    out = []
    for path in sorted(glob.glob(os.path.join(PROFILES, model, gpu, "*.json"))):
        b, t = map(int, re.findall(r"mbs(\d+)_tmp(\d+)", os.path.basename(path))[0])
        d = json.load(open(path))
        times = d["execution_time"]["layer_compute_total_ms"][1:-1]  # the blocks
        block_ms = sorted(times)[len(times) // 2]
        params = d["model"]["parameters"]["parameters_per_layer_bytes"][1] / 4 * t
        flops = 3 * b * s * (2 * params + 4 * s * h) / t
        tflops = flops / (block_ms * 1e-3) / 1e12
        out.append({"model": model, "gpu": gpu, "microbatch": b, "tp": t, "block_params_m": round(params / 1e6, 2),
                    "block_ms": block_ms, "tflops": round(tflops, 2), "fp32_peak": fp32,
                    "of_fp32_peak": round(tflops / fp32, 3), "tf32_peak": tf32 or "",
                    "above_fp32_peak": tflops > fp32})
    return out


def out_dir():
    """--out (created): out/sailor by default, shared with sailor_fit.py."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "sailor"))
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    return out


def main():
    out = out_dir()
    rows, bars = [], []
    for model in MODELS:
        for gpu in sorted(os.listdir(os.path.join(PROFILES, model))):
            r = rows_of(model, gpu)
            if not r:
                continue
            rows += r
            best = max(r, key=lambda x: x["tflops"])
            bars.append(("%s %s (mbs %d, tp %d)" % (model, gpu, best["microbatch"], best["tp"]), best["tflops"],
                         "#c44e52" if best["above_fp32_peak"] else "#4c72b0"))
            print("%-12s %-10s best %6.1f TFLOP/s per GPU = %4.0f%% of its float32 peak (%s)%s" %
                  (model, gpu, best["tflops"], 100 * best["of_fp32_peak"], best["fp32_peak"],
                   "  -> above it: TF32 tensor cores" if best["above_fp32_peak"] else ""))
    write_csv(os.path.join(out, "sailor_throughput.csv"), rows)
    bar_chart(os.path.join(out, "sailor_throughput.svg"),
              "Sailor's profiles: a block's fwd+bwd TFLOP/s per GPU, best configuration (red: above the float32 peak)",
              bars)
    print("wrote %s/sailor_throughput.csv and .svg" % out)


if __name__ == "__main__":
    main()
