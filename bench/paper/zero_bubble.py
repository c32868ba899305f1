#!/usr/bin/env python3
"""Zero-bubble schedules that know the links: harp-zb (HARP's launch counts, each W placed
into the gaps the plan's stage and link times leave) against harp-1f1b, standard 1f1b and
the paper's zb-h1 and zb-h2, on the same plan.

measured   the demo's emulated three-pool cluster (devices 1.5x, 3x and 4.5x slower than
           this CPU), its pool-b <-> pool-c link swept (0.1 Gbit/s is the demo's); at each
           bandwidth HARP plans once (from one profile) and the plan is trained through the
           shaped links under each schedule, alternating (--repeats rounds); each figure is
           the median step of the median round, beside the simulator's prediction, and
           every stage's measured peak memory beside the memory model.
simulated  the paper's cluster shapes and models (analytic costs) and the two models with
           Sailor's measured GPU profiles: HARP's plan simulated under each schedule, the
           speedup over harp-1f1b and 1f1b, the largest stage's peak memory, and what
           `harp plan --schedule auto` keeps (the fastest whose stages fit their devices).

Writes OUT/zero_bubble_measured.{csv,svg} and OUT/zero_bubble_simulated.{csv,svg}.

usage: bench/paper/zero_bubble.py [--harp PATH] [--out DIR] [--part ...] [--repeats N] [--bandwidths 0.1,...]
"""
import json
import os
import re
import subprocess
import sys

import end_to_end as e2e
import paper_lib as pl
from paper_lib import tb

SCHEDULES = ("harp-zb", "harp-1f1b", "1f1b", "zb-h1", "zb-h2")


def simulate_all(harp, plan_file):
    """schedule -> (simulated iteration s, largest stage peak memory bytes)."""
    out = {}
    for sched in SCHEDULES:
        j = json.loads(pl.run([harp, "simulate", "--plan", plan_file, "--schedule", sched, "--json"]))
        out[sched] = (j["iteration_s"], max(s["peak_memory_bytes"] for s in j["stages"]))
    return out


def measured(a):
    out = os.path.join(a.out, "zero_bubble_measured")
    data = tb.corpus(a.harp, out)
    prof = pl.sweep_base(a, out)
    rows = []
    for bw in [float(b) for b in a.bandwidths.split(",")]:
        # The CPU allocates no kernel workspace: the memory model's figure is its tensors'.
        tag, cl, job = pl.sweep_setup(a, out, bw, cost="workspace_bytes: 0")
        plan_file = os.path.join(out, "plan_%s.json" % tag)
        p = tb.plan(a.harp, job, prof, "harp", plan_file)
        got = pl.train_rounds(a, data, [(s, job, cl, plan_file, os.path.join(out, "run_%s_%s" % (tag, s)), s)
                                        for s in SCHEDULES])
        row = dict(bandwidth_gbps=bw, launch_counts=",".join(str(st["launch_count"]) for st in p["stages"]),
                   plan=pl.shape(p))
        for s in SCHEDULES:
            g = got[s]
            row[s + "_predicted_s"] = g["predicted_s"]
            row[s + "_measured_s"] = g["measured_median_s"]
            row[s + "_error"] = (g["measured_median_s"] - g["predicted_s"]) / g["predicted_s"]
            mem = g.get("memory", [])
            row[s + "_peak_predicted_mib"] = max((m["predicted_bytes"] for m in mem), default=0) / 2 ** 20
            row[s + "_peak_measured_mib"] = max((m["measured_peak_bytes"] for m in mem), default=0) / 2 ** 20
        for s in SCHEDULES[1:]:
            row["zb_over_%s_measured" % s] = row[s + "_measured_s"] / row["harp-zb_measured_s"]
            row["zb_over_%s_predicted" % s] = row[s + "_predicted_s"] / row["harp-zb_predicted_s"]
        rows.append(row)
        print("measured %6g Gbit/s  N %-7s " % (bw, row["launch_counts"]) + "  ".join(
            "%s %.3f s (pred %.3f, %+.1f%%)" % (s, row[s + "_measured_s"], row[s + "_predicted_s"],
                                                100 * row[s + "_error"]) for s in SCHEDULES), flush=True)
        print("         harp-zb over " + ", ".join(
            "%s %.3fx (pred %.3fx)" % (s, row["zb_over_%s_measured" % s], row["zb_over_%s_predicted" % s])
            for s in SCHEDULES[1:]) + "; peak MiB " + ", ".join(
            "%s %.1f/%.1f" % (s, row[s + "_peak_measured_mib"], row[s + "_peak_predicted_mib"]) for s in SCHEDULES),
              flush=True)
    tb.write_csv(os.path.join(a.out, "zero_bubble_measured.csv"), rows)
    series = []
    for s in SCHEDULES:
        series.append((s + " measured", [(r["bandwidth_gbps"], r[s + "_measured_s"]) for r in rows], False))
        series.append((s + " predicted", [(r["bandwidth_gbps"], r[s + "_predicted_s"]) for r in rows], True))
    tb.line_chart(os.path.join(a.out, "zero_bubble_measured.svg"),
                  "Zero-bubble schedules on the testbed as the slow link falls (one HARP plan per bandwidth)",
                  "pool-b <-> pool-c bandwidth (Gbit/s, log scale)", "iteration (s)", series, log_x=True,
                  note="harp-zb over harp-1f1b (measured): " + ", ".join(
                      "%g: %.2fx" % (r["bandwidth_gbps"], r["zb_over_harp-1f1b_measured"]) for r in rows))
    return rows


def simulated(a):
    d = os.path.join(a.out, "zero_bubble_simulated")
    # Besides each analytic case, fewer, larger microbatches (the same global batch): the
    # bubble is larger; they fit only with recomputation.
    cases = e2e.paper_cases(a, d, ("analytic; B=16", ["--microbatches", "16", "--recompute", "auto"]))
    rows = []
    for cluster, model, costs, job, extra in cases:
        plan_file = job[:-len(".job.yaml")] + (".zb_plan_b16.json" if "--microbatches" in extra else ".zb_plan.json")
        r = subprocess.run([a.harp, "plan", "--job", job, "--output", plan_file] + extra, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode == 3:  # no plan fits this case's memory: nothing to compare
            print("simulated %-22s %-13s %-15s infeasible: %s" % (
                cluster, model, costs, (r.stderr.strip().splitlines() or ["no plan"])[-1][:160]), flush=True)
            continue
        if r.returncode != 0:
            sys.exit("failed (%d): harp plan --job %s\n%s" % (r.returncode, job, r.stderr[-3000:]))
        p = json.load(open(plan_file))
        sims = simulate_all(a.harp, plan_file)
        row = dict(cluster=cluster, model=model, costs=costs, plan=pl.shape(p))
        for s in SCHEDULES:
            row[s + "_s"], mem = sims[s]
            row[s + "_peak_gib"] = mem / 2 ** 30
        row["over_harp_1f1b"] = row["harp-1f1b_s"] / row["harp-zb_s"]
        row["over_1f1b"] = row["1f1b_s"] / row["harp-zb_s"]
        row["over_zb_h1"] = row["zb-h1_s"] / row["harp-zb_s"]
        row["memory_over_harp_1f1b"] = row["harp-zb_peak_gib"] / row["harp-1f1b_peak_gib"]
        # The planner's own choice: the fastest schedule whose stages fit their devices.
        auto = json.loads(pl.run([a.harp, "plan", "--job", job, "--schedule", "auto", "--json"] + extra))
        chosen = [o for o in auto["schedule_options"] if o["schedule"] == auto["schedule"]][0]
        row["auto_schedule"], row["auto_s"] = auto["schedule"], chosen["simulated_s"]
        row["fits"] = " ".join(o["schedule"] for o in auto["schedule_options"] if o["fits"])
        # It weighs the other plans the search met too: another plan may win under a split.
        cuts = lambda shape: re.sub(r" N\d+", "", shape)  # the same placements, another schedule's counts
        row["auto_plan"] = pl.shape(auto) if cuts(pl.shape(auto)) != cuts(row["plan"]) else "the same"
        row["auto_peak_gib"] = chosen["peak_bytes"] / 2 ** 30
        row["auto_over_harp_1f1b"] = row["harp-1f1b_s"] / row["auto_s"]
        rows.append(row)
        print("simulated %-22s %-13s %-15s harp-zb %.3f s: %.3fx over harp-1f1b, %.3fx over 1f1b, %.3fx over zb-h1; "
              "zb-h2 %.3fx; peak memory %.2fx harp-1f1b's" % (
                  cluster, model, costs, row["harp-zb_s"], row["over_harp_1f1b"], row["over_1f1b"],
                  row["over_zb_h1"], row["harp-1f1b_s"] / row["zb-h2_s"], row["memory_over_harp_1f1b"]), flush=True)
        print("          --schedule auto: %s %.3f s, %.3fx over HARP's plan under harp-1f1b, peak %.1f GiB "
              "(fitting: %s), plan %s" % (row["auto_schedule"], row["auto_s"], row["auto_over_harp_1f1b"],
                                          row["auto_peak_gib"], row["fits"], row["auto_plan"]), flush=True)
    pl.write_csv(os.path.join(a.out, "zero_bubble_simulated.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "zero_bubble_simulated.svg"),
                 "Split backwards on HARP's plans: speedup over harp-1f1b (simulated at paper scale)",
                 [("%s %s (%s)" % (r["model"], r["cluster"], r["costs"]),
                   [r["harp-1f1b_s"] / r[s + "_s"] for s in ("harp-zb", "zb-h1", "zb-h2", "1f1b", "auto")])
                  for r in rows],
                 ["harp-zb", "zb-h1", "zb-h2", "1f1b", "--schedule auto (any searched plan)"],
                 "speedup over harp-1f1b (x)", wide=True,
                 note="line at 1x: harp-1f1b")
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "zero_bubble", simulated, measured,
            extra=lambda ap: ap.add_argument("--bandwidths", default="0.1,0.02,0.01,0.005"))
