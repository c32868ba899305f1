#!/usr/bin/env python3
"""Joint planning and scheduling (the paper's Fig. 11b): the plan searched with HARP's
schedule in the cost model (its launch counts, their memory) against the plan searched
for standard 1F1B and then run with HARP's schedule (`harp plan --search-schedule 1f1b`:
the counts come after the search, lowered where they do not fit memory).

measured   the emulated three-pool testbed at 0.1 / 0.01 and 0.1 / 0.005 Gbit/s. Where
           memory is ample both searches find the same plan (their objective is the
           same; only the memory check of the launch counts differs), so each setup is
           also run memory-bound: the first pool's device is declared with just enough
           memory for the 1F1B-searched plan's first stage at standard 1F1B's count
           (state + (S + 0.5) x activations; the runtime does not enforce memory on a
           CPU, the planner does). Both plans are trained through the shaped links under
           HARP's 1F1B; one training where the two plans agree.
simulated  GPT-2.6B on 8 V100 + 2x2 A100 and GPT-6.7B on 8 V100 + 2 A100 + 2 A100' at 3, 5
           and 10 Gbit/s between pools, analytic costs, global batch 1024 (--microbatches
           auto: each search picks its B), both plans under HARP's 1F1B in the simulator.

Writes OUT/joint_measured.{csv,svg} and OUT/joint_simulated.{csv,svg}.

usage: bench/paper/joint.py [--harp PATH] [--out DIR] [--part ...] [--steps N]
"""
import json
import os

import paper_lib as pl
from paper_lib import tb

THREE = [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)]
TESTBED = [("three-0.01", [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)]),
           ("three-0.005", [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.005)])]
RESERVE = 0.1  # CostConfig.memory_reserve_fraction: usable = (1 - RESERVE) x memory
SIM_SETUPS = [("8V100+2x2A100", "gpt-2.6b", 2), ("8V100+2A100+2A100'", "gpt-6.7b", 3)]
SIM_BANDWIDTHS = [3, 5, 10]


def plan_blind(harp, job, prof, path):
    pl.run([harp, "plan", "--job", job, "--profile", prof, "--strategy", "harp", "--max-tp", "1",
            "--search-schedule", "1f1b", "--output", path])
    return json.load(open(path))


def measured(a):
    out = os.path.join(a.out, "joint_measured")
    data = tb.corpus(a.harp, out)
    rows = []
    for name, links in TESTBED:
        d = os.path.join(out, name)
        cl, job, prof = tb.setup(a.harp, d, name, THREE, links, "gpt-testbed", 16, 1, a.steps, [1])
        first = plan_blind(a.harp, job, prof, os.path.join(d, "blind_ample.json"))["stages"][0]
        n_std = len(THREE)
        tight = (first["memory_static_bytes"] + (n_std + 0.5) * first["activation_bytes"]) / (1 - RESERVE) / 2 ** 30
        for memory, cluster in (("ample", cl), ("bound", None)):
            dm = os.path.join(d, memory)
            if cluster is None:
                cluster = tb.write(os.path.join(dm, "cluster.yaml"),
                                   tb.cluster_yaml(name, THREE, links, memory_gib={"cpu-a": tight}))
            job_m = tb.write(os.path.join(dm, "job.yaml"), tb.job_yaml(cluster, "gpt-testbed", 16, 1, a.steps))
            joint = tb.plan(a.harp, job_m, prof, "harp", os.path.join(dm, "joint.json"))
            blind = plan_blind(a.harp, job_m, prof, os.path.join(dm, "blind.json"))
            same = pl.shape(joint) == pl.shape(blind)
            runs = [(p, job_m, cluster, os.path.join(dm, p + ".json"), os.path.join(dm, "run_" + p), None)
                    for p in (("joint",) if same else ("joint", "blind"))]
            got = pl.train_rounds(a, data, runs)
            sj = got["joint"]
            sb = got["joint" if same else "blind"]
            row = dict(setup=name, memory=memory, pool_a_memory_gib=16 if memory == "ample" else tight,
                       joint_plan=pl.shape(joint), blind_plan=pl.shape(blind), same_plan=same,
                       joint_predicted_s=sj["predicted_s"], joint_measured_s=sj["measured_median_s"],
                       blind_predicted_s=sb["predicted_s"], blind_measured_s=sb["measured_median_s"])
            row["speedup_measured"] = row["blind_measured_s"] / row["joint_measured_s"]
            row["speedup_predicted"] = row["blind_predicted_s"] / row["joint_predicted_s"]
            rows.append(row)
            print("measured  %-12s %-5s joint %.3f s (pred %.3f) %s | blind %.3f s (pred %.3f) %s | joint over "
                  "blind %.2fx (pred %.2fx)%s" % (name, memory, row["joint_measured_s"], row["joint_predicted_s"],
                                                  row["joint_plan"], row["blind_measured_s"],
                                                  row["blind_predicted_s"], row["blind_plan"],
                                                  row["speedup_measured"], row["speedup_predicted"],
                                                  "  (same plan)" if same else ""), flush=True)
    tb.write_csv(os.path.join(a.out, "joint_measured.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "joint_measured.svg"),
                 "Schedule in the search, on the testbed: joint plan over the 1F1B-searched plan (both under "
                 "HARP's 1F1B)", [("%s %s" % (r["setup"], r["memory"]), [r["speedup_measured"], r["speedup_predicted"]])
                                  for r in rows],
                 ["measured", "predicted (simulated)"], "speedup (x)",
                 note="ample: 16 GiB per device; bound: pool-a's device holds the blind plan's first stage at 1F1B's count")
    return rows


def simulated(a):
    d = os.path.join(a.out, "joint_simulated")
    rows = []
    for cluster, model, k in SIM_SETUPS:
        for bw in SIM_BANDWIDTHS:
            name, job = pl.write_setup(d, cluster, model, k, bandwidth_gbps=bw)
            auto = ["--microbatches", "auto"]
            j = pl.plan_and_simulate(a.harp, job, "harp", os.path.join(d, name + ".joint.json"), auto)
            b = pl.plan_and_simulate(a.harp, job, "harp", os.path.join(d, name + ".blind.json"),
                                     auto + ["--search-schedule", "1f1b"])
            row = dict(setup="%s %s" % (cluster, model), bandwidth_gbps=bw,
                       joint_s=j["simulated_s"], joint_closed_form_s=j["predicted_s"], joint_plan=pl.shape(j["plan"]),
                       blind_s=b["simulated_s"], blind_closed_form_s=b["predicted_s"], blind_plan=pl.shape(b["plan"]))
            row["joint_over_blind"] = row["blind_s"] / row["joint_s"]
            rows.append(row)
            print("simulated %-30s %3g Gbit/s  joint %7.3f s %s | blind %7.3f s %s | joint over blind %.3fx"
                  % (row["setup"], bw, row["joint_s"], row["joint_plan"], row["blind_s"], row["blind_plan"],
                     row["joint_over_blind"]), flush=True)
    tb.write_csv(os.path.join(a.out, "joint_simulated.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "joint_simulated.svg"),
                 "Schedule in the search, at paper scale (simulated): joint plan over the 1F1B-searched plan",
                 [("%s %gG" % (r["setup"].split(" ")[1], r["bandwidth_gbps"]), [r["joint_over_blind"]]) for r in rows],
                 ["joint over blind, both under HARP's 1F1B"], "speedup (x)",
                 note="below 1x: the plan searched without the schedule runs faster (see docs/evaluation.md)")
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "joint", simulated, measured)
