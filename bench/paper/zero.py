#!/usr/bin/env python3
"""Sharded optimizer state (ZeRO) chosen per stage by the planner, against none: both
with recomputation chosen per stage too.

simulated  the paper's cluster shapes and models (analytic costs) and the two models with
           Sailor's measured GPU profiles: `harp plan --zero auto --recompute auto`
           against `--zero 0 --recompute auto`, each plan timed by `harp simulate`.
measured   a CPU testbed whose replicated stage's devices have 5% more memory than that
           stage needs with ZeRO-1: the plan that shards and the best one without (the
           unsharded stage does not fit), trained through the shaped links; iteration
           time and every stage's peak and state memory, predicted beside measured.

Writes OUT/zero_simulated.{csv,svg} and OUT/zero_measured.{csv,svg}.

usage: bench/paper/zero.py [--harp PATH] [--out DIR] [--part ...] [--steps N]
"""
import json
import os

import end_to_end as e2e
import paper_lib as pl
from paper_lib import tb

POLICIES = (("none", ["--zero", "0", "--recompute", "auto"]), ("auto", ["--zero", "auto", "--recompute", "auto"]))


def shape(p):
    """A plan's stages in one line, with each stage's ZeRO level and recomputation."""
    return " | ".join("[%d,%d) %dx%d%s%s N%d" % (s["layers"][0], s["layers"][1], s["dp"], s["tp"],
                                                 " z%d" % s["zero"] if s.get("zero") else "",
                                                 " " + s["recompute"] if s.get("recompute") else "", s["launch_count"])
                      for s in p["stages"])


def simulated(a):
    d = os.path.join(a.out, "zero_simulated")
    cases = e2e.paper_cases(a, d)
    rows = []
    for cluster, model, costs, job, extra in cases:
        base = job[:-len(".job.yaml")]
        got = {name: pl.plan_and_simulate(a.harp, job, "harp", "%s.zero_%s.json" % (base, name), extra + flags)
               for name, flags in POLICIES}
        row = dict(cluster=cluster, model=model, costs=costs)
        for name, _ in POLICIES:
            g = got[name]
            row[name + "_s"] = g["simulated_s"] if g["feasible"] else float("nan")
            row[name + "_plan"] = shape(g["plan"]) if g["feasible"] else g["reason"][:160]
            row[name + "_search_s"] = g.get("search_s", float("nan"))
            row[name + "_max_memory_gib"] = (max(s["memory_bytes"] for s in g["plan"]["stages"]) / 2 ** 30
                                             if g["feasible"] else float("nan"))
        row["speedup"] = row["none_s"] / row["auto_s"] if row["none_s"] == row["none_s"] else float("nan")
        row["plan_changed"] = row["none_plan"] != row["auto_plan"].replace(" z1", "")
        rows.append(row)
        print("%-22s %-13s %-15s none %8.3f s  auto %8.3f s  %.3fx  %s" % (
            cluster, model, costs, row["none_s"], row["auto_s"], row["speedup"], row["auto_plan"]))
    pl.write_csv(os.path.join(a.out, "zero_simulated.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "zero_simulated.svg"),
                 "ZeRO chosen per stage (--zero auto) against none, both with --recompute auto (simulated)",
                 [("%s %s (%s)" % (r["model"], r["cluster"], r["costs"]), [r["speedup"]]) for r in rows],
                 ["speedup of --zero auto over --zero 0"], "speedup (x)", wide=True,
                 note="line at 1x: sharding changes nothing")
    return rows


# The measured setup: two pools of one and two emulated devices and a slow link; the
# devices' memory is set between what the replicated stage needs with and without ZeRO.
POOLS = [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 2)]
LINKS = [("pool-a", "pool-b", 0.1)]
MODEL = "gpt-testbed-wide"


def measured(a):
    out = os.path.join(a.out, "zero_measured")
    data = tb.corpus(a.harp, out)
    d = os.path.join(out, MODEL)
    cl, job, prof = tb.setup(a.harp, d, "zero", POOLS, LINKS, MODEL, 8, 2, a.steps, [1, 2])
    # The CPU allocates no kernel workspace: the plans' memory is their tensors'.
    text = open(job).read().replace("cost: {", "cost: {workspace_bytes: 0, ")
    job = tb.write(os.path.join(d, "zero.job.yaml"), text)
    # Roomy memory first: the fastest plan, with and without ZeRO.
    free = {}
    for name, flags in POLICIES:
        p = os.path.join(d, "roomy_%s.json" % name)
        pl.run([a.harp, "plan", "--job", job, "--profile", prof, "--max-tp", "1", "--output", p] + flags)
        free[name] = json.load(open(p))
    sharded = [(i, s) for i, s in enumerate(free["auto"]["stages"]) if s.get("zero")]
    if not sharded:
        print("the fastest plan has no replicated stage to shard: nothing to measure")
        return []
    i, st = sharded[0]
    # The sharded stage's devices get 5% more memory than it needs sharded (unsharded it
    # needs a third more: the moments are half the state): that plan fits only sharded.
    gib = st["memory_bytes"] * 1.05 / 2 ** 30 / (1 - 0.1)
    device = st["device"]
    cl = tb.write(os.path.join(d, "zero_tight.cluster.yaml"),
                  tb.cluster_yaml("zero", POOLS, LINKS, memory_gib={device: gib}))
    text = open(job).read().replace(os.path.abspath(os.path.join(d, "cluster.yaml")), os.path.abspath(cl))
    job = tb.write(os.path.join(d, "zero_tight.job.yaml"), text)
    plans = {}
    for name, flags in POLICIES:
        plans[name] = os.path.join(d, "tight_%s.json" % name)
        pl.run([a.harp, "plan", "--job", job, "--profile", prof, "--max-tp", "1", "--output", plans[name]] + flags)
    # --repeats rounds, the two runs alternating inside a round; the median over rounds.
    summaries = {name: [] for name in plans}
    for r in range(a.repeats):
        for name in plans:
            summaries[name].append(tb.train(a.harp, job, cl, plans[name], data, os.path.join(d, "run_%s_%d" % (name, r))))
    rows = []
    for name in plans:
        p = json.load(open(plans[name]))
        s = summaries[name][-1]
        measured_s = tb.median([x["measured_median_s"] for x in summaries[name]])
        row = dict(policy=name, plan=shape(p), predicted_s=s["predicted_s"], measured_s=measured_s,
                   error=(s["predicted_s"] - measured_s) / measured_s, device=device, memory_gib=gib)
        for m in s.get("memory", []):
            row["stage%d_predicted_mib" % m["stage"]] = m["predicted_bytes"] / 2 ** 20
            row["stage%d_measured_mib" % m["stage"]] = m["measured_peak_bytes"] / 2 ** 20
            row["stage%d_state_predicted_mib" % m["stage"]] = m["predicted_static_bytes"] / 2 ** 20
            row["stage%d_state_measured_mib" % m["stage"]] = m["measured_state_bytes"] / 2 ** 20
        rows.append(row)
        print("%-5s predicted %.3f s measured %.3f s (%+.1f%%)  %s" % (
            name, row["predicted_s"], row["measured_s"], 100 * row["error"], row["plan"]))
    pl.write_csv(os.path.join(a.out, "zero_measured.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "zero_measured.svg"),
                 "%s with %.3f GiB: only with ZeRO-1 does the fastest plan fit (testbed)" % (device, gib),
                 [(r["policy"] + ": " + r["plan"], [r["predicted_s"], r["measured_s"]]) for r in rows],
                 ["predicted", "measured"], "iteration (s)", wide=True, unit_line=False)
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "zero", simulated, measured)
