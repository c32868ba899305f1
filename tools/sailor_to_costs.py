#!/usr/bin/env python3
"""Converts the measured Sailor/Metis layer profiles in shared/data/profiles/sailor into a
HARP cost table (docs/file_formats.md, "Cost table"), tensor parallelism 1.

What the source gives: per layer, forward+backward time for one microbatch, parameter
bytes and activation bytes. What it lacks, and the choice made here:
  - forward and backward are not separate: forward = 1/3, backward = 2/3 of the total
    (the usual ratio of matrix-multiply work);
  - bytes crossing a cut: hidden x sequence x 2 bytes per sample (fp16 hidden state),
    with --hidden and --seq given on the command line;
  - activation bytes are taken from the profile at the full microbatch, per sample;
  - the profiles count parameters in fp32 bytes; HARP's param_bytes are fp16 bytes (the
    cost model multiplies them into the mixed-precision training state), so halve them.

usage: sailor_to_costs.py PROFILES_DIR MODEL MICROBATCH_SIZE --gpu SRC=DEVICE ... \
       --hidden H --seq S > costs.json
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profiles")
    ap.add_argument("model")
    ap.add_argument("microbatch_size", type=int)
    ap.add_argument("--gpu", action="append", required=True, help="SRC=DEVICE, e.g. A100-40=A100-40GB")
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    a = ap.parse_args()
    mbs = a.microbatch_size
    sizes = [s for s in range(1, mbs + 1) if mbs % s == 0]
    devices, layers = {}, None
    for spec in a.gpu:
        src, dst = spec.split("=")
        per_size = {}
        for s in sizes:
            path = os.path.join(a.profiles, a.model, src, "mbs%d_tmp1.json" % s)
            if not os.path.exists(path):
                continue
            d = load(path)
            total = [t * 1e-3 for t in d["execution_time"]["layer_compute_total_ms"]]
            per_size[str(s)] = {"fwd_s": [t / 3 for t in total], "bwd_s": [2 * t / 3 for t in total]}
            if s == mbs and layers is None:
                p = d["model"]["parameters"]
                layers = [{"name": "layer%d" % i,
                           "param_bytes": float(p["parameters_per_layer_bytes"][i]) / 2,
                           "activation_bytes": float(p["activation_parameters_bytes"][i]) / mbs,
                           "output_bytes": float(2 * a.hidden * a.seq)}
                          for i in range(d["model"]["num_layers"])]
        if str(mbs) not in per_size:
            sys.exit("%s has no profile at microbatch size %d" % (src, mbs))
        devices[dst] = per_size
    json.dump({"version": 1, "microbatch_size": mbs, "layers": layers, "devices": devices},
              sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
