#!/usr/bin/env python3
"""The granularity ablation (the paper's Fig. 11a): k = 1, 2, 3, 4 sub-layers per block,
the iteration time of HARP's plan at each, and what profiling costs (the zero-redundant
profiler, one measurement per unique layer signature, against measuring every layer).

measured   the emulated three-pool cluster (0.1 and 0.01 Gbit/s links), the testbed GPT.
           For each k: `harp profile` (zero-redundant) and `harp profile --per-layer`,
           both timed (wall seconds of the whole command: three device types, the
           job's microbatch size), a plan from the zero-redundant profile, trained
           through the shaped links (--repeats rounds over the four plans, alternating).
simulated  GPT-2.6B on 8 V100 + 2x2 A100 and GPT-6.7B on 8 V100 + 2 A100 + 2 A100',
           analytic costs, --microbatches auto: HARP's simulated iteration, its search
           time, and the layer counts a profiler must measure per (device type, dp x tp
           shape): unique signatures (`harp model show`) against every layer.

Writes OUT/granularity_measured.{csv,svg} and OUT/granularity_simulated.{csv,svg}.

usage: bench/paper/granularity.py [--harp PATH] [--out DIR] [--part ...] [--steps N]
"""
import os
import re
import time

import paper_lib as pl
from paper_lib import tb

KS = [1, 2, 3, 4]
SIM_SETUPS = [("8V100+2x2A100", "gpt-2.6b"), ("8V100+2A100+2A100'", "gpt-6.7b")]
POOLS = [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)]
LINKS = [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)]


def layer_counts(harp, model, k):
    """(layers, unique signatures) of `model` at granularity k, from `harp model show`."""
    text = pl.run([harp, "model", "show", model, "--granularity", str(k)])
    sigs = set()
    layers = 0
    for line in text.splitlines():
        m = re.match(r"\s*\d+\s+\S+\s+([0-9a-f]{8})\s", line)
        if m:
            layers += 1
            sigs.add(m.group(1))
    return layers, len(sigs)


def timed(cmd):
    start = time.perf_counter()
    pl.run(cmd)
    return time.perf_counter() - start


def measured(a):
    out = os.path.join(a.out, "granularity_measured")
    data = tb.corpus(a.harp, out)
    setups = {}
    for k in KS:
        d = os.path.join(out, "k%d" % k)
        cl = tb.write(os.path.join(d, "cluster.yaml"), tb.cluster_yaml("gran", POOLS, LINKS))
        job_text = tb.job_yaml(cl, "gpt-testbed", 16, 1, a.steps).replace("granularity: 2", "granularity: %d" % k)
        job = tb.write(os.path.join(d, "job.yaml"), job_text)
        prof = os.path.join(d, "profile.json")
        zrp_s = timed([a.harp, "profile", "--job", job, "-o", prof])
        per_layer_s = timed([a.harp, "profile", "--job", job, "--per-layer", "-o", os.path.join(d, "per_layer.json")])
        plan_file = os.path.join(d, "harp.json")
        p = tb.plan(a.harp, job, prof, "harp", plan_file)
        setups[k] = (d, cl, job, plan_file, p, zrp_s, per_layer_s)
    got = pl.train_rounds(a, data, [(k, job, cl, plan_file, os.path.join(d, "run"), None)
                                    for k, (d, cl, job, plan_file, _, _, _) in setups.items()])
    rows = []
    for k, (d, cl, job, plan_file, p, zrp_s, per_layer_s) in setups.items():
        s = got[k]
        blocks, hidden, heads, seq = tb.MODELS["gpt-testbed"]
        model_file = tb.write(os.path.join(d, "model.yaml"),
                              "family: gpt\nname: gpt-testbed\nnum_blocks: %d\nhidden: %d\nheads: %d\nseq_len: %d\n"
                              "vocab: 256\n" % (blocks, hidden, heads, seq))
        layers, unique = layer_counts(a.harp, model_file, k)
        row = dict(k=k, layers=layers, unique_layers=unique, zrp_profile_s=zrp_s, per_layer_profile_s=per_layer_s,
                   profile_saving=per_layer_s / zrp_s, stages=len(p["stages"]), plan=pl.shape(p),
                   predicted_s=s["predicted_s"], measured_s=s["measured_median_s"],
                   error=(s["predicted_s"] - s["measured_median_s"]) / s["measured_median_s"])
        rows.append(row)
        print("measured  k=%d  %2d layers (%d unique)  profile %.1f s zero-redundant, %.1f s per layer (%.1fx)  "
              "plan %s  predicted %.3f s  measured %.3f s (%+.1f%%)"
              % (k, row["layers"], row["unique_layers"], zrp_s, per_layer_s, row["profile_saving"], row["plan"],
                 row["predicted_s"], row["measured_s"], 100 * row["error"]), flush=True)
    tb.write_csv(os.path.join(a.out, "granularity_measured.csv"), rows)
    best = min(rows, key=lambda r: r["measured_s"])
    tb.bar_chart(os.path.join(a.out, "granularity_measured.svg"),
                 "Granularity on the testbed: iteration (s) and profiling cost (s / 10)",
                 [("k = %d" % r["k"], [r["measured_s"], r["predicted_s"], r["zrp_profile_s"] / 10,
                                       r["per_layer_profile_s"] / 10]) for r in rows],
                 ["iteration, measured", "iteration, predicted", "profiling, zero-redundant (/10)",
                  "profiling, per layer (/10)"], "seconds",
                 note="best measured k = %d; profiling: whole `harp profile` commands, 3 device types" % best["k"])
    return rows


def simulated(a):
    d = os.path.join(a.out, "granularity_simulated")
    rows = []
    for cluster, model in SIM_SETUPS:
        for k in KS:
            name, job = pl.write_setup(d, cluster, model, k, tag="k%d" % k)
            h = pl.plan_and_simulate(a.harp, job, "harp", os.path.join(d, name + ".harp.json"), ["--microbatches", "auto"])
            layers, unique = layer_counts(a.harp, model, k)
            row = dict(setup="%s %s" % (cluster, model), k=k, layers=layers, unique_layers=unique,
                       harp_s=h["simulated_s"] if h["feasible"] else float("nan"),
                       search_s=h.get("search_s", float("nan")), plan=pl.shape(h["plan"]) if h["feasible"] else h["reason"])
            rows.append(row)
            print("simulated %-30s k=%d  %3d layers, %d unique  harp %7.3f s  search %6.1f ms  %s"
                  % (row["setup"], k, layers, unique, row["harp_s"], 1e3 * row["search_s"], row["plan"]), flush=True)
    tb.write_csv(os.path.join(a.out, "granularity_simulated.csv"), rows)
    groups = []
    for setup in [s for i, s in enumerate(r["setup"] for r in rows) if s not in [r["setup"] for r in rows][:i]]:
        mine = [r for r in rows if r["setup"] == setup]
        k1 = mine[0]["harp_s"]
        groups += [("%s k=%d" % (setup.split(" ")[1], r["k"]), [k1 / r["harp_s"], r["unique_layers"] / r["layers"]])
                   for r in mine]
    tb.bar_chart(os.path.join(a.out, "granularity_simulated.svg"),
                 "Granularity at paper scale (simulated): speedup over k = 1, and profiling work left by dedup",
                 groups, ["speedup over k = 1", "layers to profile: unique / all"], "ratio", wide=True,
                 note="analytic costs; --microbatches auto")
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "granularity", simulated, measured)
