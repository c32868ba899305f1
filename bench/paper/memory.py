#!/usr/bin/env python3
"""Memory overhead of HARP's launch counts against standard 1F1B, per stage: HARP keeps
more microbatches in flight on the stages before a slow link, and only there.

measured   the emulated three-pool cluster (0.1 and 0.01 Gbit/s), two small GPTs: HARP's
           plan trained through the shaped links under harp-1f1b and under 1f1b. Each
           rank's tensor memory is counted by the runtime's allocator (summary.json
           "memory": the peak during a step, first replica of each stage); the extra
           memory of HARP's counts is the difference of the two peaks, set beside the
           plan's prediction, (N_harp - N_1f1b) x the stage's activation bytes.
simulated  GPT-2.6B on 8 V100 + 2x2 A100 and GPT-6.7B on 8 V100 + 2 A100 + 2 A100' at
           5 Gbit/s: the planner's memory per stage (state + N x activations) under both
           counts, and the simulator's peak in-flight memory.

Writes OUT/memory_measured.{csv,svg} and OUT/memory_simulated.{csv,svg}.

usage: bench/paper/memory.py [--harp PATH] [--out DIR] [--part ...] [--steps N]
"""
import json
import os

import paper_lib as pl
from paper_lib import tb

POOLS = [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)]
LINKS = [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)]
MODELS = ["gpt-testbed", "gpt-testbed-wide"]
SIM_SETUPS = [("8V100+2x2A100", "gpt-2.6b", 2), ("8V100+2A100+2A100'", "gpt-6.7b", 3)]
MIB = 2.0 ** 20
GIB = 2.0 ** 30


def measured(a):
    out = os.path.join(a.out, "memory_measured")
    data = tb.corpus(a.harp, out)
    rows = []
    for model in MODELS:
        d = os.path.join(out, model)
        cl, job, prof = tb.setup(a.harp, d, "mem", POOLS, LINKS, model, 16, 1, a.steps, [1])
        plan_file = os.path.join(d, "harp.json")
        tb.plan(a.harp, job, prof, "harp", plan_file)
        runs = pl.train_rounds(a, data, [(s, job, cl, plan_file, os.path.join(d, "run_" + s), s)
                                         for s in ("harp-1f1b", "1f1b")])
        for h, s in zip(runs["harp-1f1b"]["memory"], runs["1f1b"]["memory"]):
            extra_n = h["launch_count"] - s["launch_count"]
            row = dict(model=model, stage=h["stage"], n_harp=h["launch_count"], n_1f1b=s["launch_count"],
                       measured_peak_harp_mib=h["measured_peak_bytes"] / MIB,
                       measured_peak_1f1b_mib=s["measured_peak_bytes"] / MIB,
                       measured_state_mib=h["measured_base_bytes"] / MIB,
                       measured_extra_mib=(h["measured_peak_bytes"] - s["measured_peak_bytes"]) / MIB,
                       predicted_extra_mib=extra_n * h["predicted_activation_bytes"] / MIB,
                       predicted_activation_mib=h["predicted_activation_bytes"] / MIB)
            row["measured_overhead"] = row["measured_extra_mib"] / row["measured_peak_1f1b_mib"]
            row["measured_activation_mib"] = row["measured_extra_mib"] / extra_n if extra_n else float("nan")
            rows.append(row)
            print("measured  %-17s stage %d  N %d vs %d  peak %.2f vs %.2f MiB (state %.2f)  extra measured %.2f MiB "
                  "(%+.0f%%), predicted %.2f MiB" % (model, row["stage"], row["n_harp"], row["n_1f1b"],
                                                     row["measured_peak_harp_mib"], row["measured_peak_1f1b_mib"],
                                                     row["measured_state_mib"], row["measured_extra_mib"],
                                                     100 * row["measured_overhead"], row["predicted_extra_mib"]),
                  flush=True)
    tb.write_csv(os.path.join(a.out, "memory_measured.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "memory_measured.svg"),
                 "Tensor memory per stage on the testbed (MiB): HARP's counts against 1F1B's, measured",
                 [("%s s%d N%d/%d" % (r["model"].replace("gpt-testbed", "tb"), r["stage"], r["n_harp"], r["n_1f1b"]),
                   [r["measured_peak_harp_mib"], r["measured_peak_1f1b_mib"], r["measured_extra_mib"],
                    r["predicted_extra_mib"]]) for r in rows],
                 ["peak, harp-1f1b", "peak, 1f1b", "extra, measured", "extra, predicted"], "MiB", wide=True,
                 unit_line=False,
                 note="peak: live tensor bytes during a step (counting allocator), first replica of each stage")
    return rows


def simulated(a):
    d = os.path.join(a.out, "memory_simulated")
    rows = []
    for cluster, model, k in SIM_SETUPS:
        name, job = pl.write_setup(d, cluster, model, k)
        plan_file = os.path.join(d, name + ".harp.json")
        h = pl.plan_and_simulate(a.harp, job, "harp", plan_file, ["--microbatches", "auto"])
        sims = {s: json.loads(pl.run([a.harp, "simulate", "--plan", plan_file, "--schedule", s, "--json"]))
                for s in ("harp-1f1b", "1f1b")}
        S = len(h["plan"]["stages"])
        for i, st in enumerate(h["plan"]["stages"]):
            n_std = min(S - i, h["plan"]["microbatches"])
            row = dict(setup="%s %s" % (cluster, model), stage=i, subcluster=st["subcluster_name"],
                       n_harp=st["launch_count"], n_1f1b=n_std, state_gib=st["memory_static_bytes"] / GIB,
                       planned_harp_gib=st["memory_bytes"] / GIB,
                       planned_1f1b_gib=(st["memory_static_bytes"] + n_std * st["activation_bytes"]) / GIB,
                       sim_peak_harp_gib=sims["harp-1f1b"]["stages"][i]["peak_memory_bytes"] / GIB,
                       sim_peak_1f1b_gib=sims["1f1b"]["stages"][i]["peak_memory_bytes"] / GIB)
            row["overhead"] = row["planned_harp_gib"] / row["planned_1f1b_gib"] - 1
            rows.append(row)
            print("simulated %-30s stage %d (%s)  N %d vs %d  planned %.1f vs %.1f GiB (%+.0f%%)  simulated peak "
                  "%.1f vs %.1f GiB" % (row["setup"], i, row["subcluster"], row["n_harp"], n_std,
                                        row["planned_harp_gib"], row["planned_1f1b_gib"], 100 * row["overhead"],
                                        row["sim_peak_harp_gib"], row["sim_peak_1f1b_gib"]), flush=True)
    tb.write_csv(os.path.join(a.out, "memory_simulated.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "memory_simulated.svg"),
                 "Memory per device and stage at paper scale (GiB): HARP's counts against 1F1B's",
                 [("%s s%d %s" % (r["setup"].split(" ")[1], r["stage"], r["subcluster"]),
                   [r["planned_harp_gib"], r["planned_1f1b_gib"], r["state_gib"]]) for r in rows],
                 ["HARP's counts", "1F1B's counts", "state only"], "GiB", wide=True, unit_line=False,
                 note="planner's figures (state + N x activations), analytic costs, 5 Gbit/s between pools")
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "memory", simulated, measured)
