#!/usr/bin/env python3
"""The bandwidth sweep (the paper's Fig. 10): HARP's 1F1B against standard 1F1B, and HARP
against the baselines, as the cross-pool link slows.

measured   the emulated three-pool cluster of the demo (devices 1.5x, 3x and 4.5x slower
           than this CPU), its pool-b <-> pool-c link swept from 0.1 down to 0.005 Gbit/s.
           This machine computes about two orders of magnitude slower than a GPU, so the
           paper's 10 -> 3 Gbit/s maps to links this much slower: at 0.01 Gbit/s one
           activation of the testbed GPT (32 KiB) takes about as long on the link as a
           stage's forward (about 13 ms), as a GPT-2.6B activation does at 3 Gbit/s on
           V100s. At each bandwidth HARP plans (from one profile, made first) and the
           plan is trained through the shaped links under HARP's 1F1B and under standard
           1F1B, alternating (--repeats rounds) so that drifts of this machine's speed
           hit both alike; each figure is the median step of the median round.
simulated  GPT-2.6B on 8 V100 + 2x2 A100 and GPT-6.7B on 8 V100 + 2 A100 + 2 A100', every
           cross-pool link at 1 ... 25 Gbit/s (the paper's 3 -> 10 and below), each
           strategy planned at each bandwidth (--microbatches auto), analytic costs.

Writes OUT/bandwidth_measured.{csv,svg} and OUT/bandwidth_simulated.{csv,svg}.

usage: bench/paper/bandwidth.py [--harp PATH] [--out DIR] [--part ...] [--repeats N] [--bandwidths 0.1,...]
"""
import os

import paper_lib as pl
from paper_lib import tb

SIM_BANDWIDTHS = [1, 2, 3, 4, 5, 7, 10, 25]
SIM_SETUPS = [("8V100+2x2A100", "gpt-2.6b", 2), ("8V100+2A100+2A100'", "gpt-6.7b", 3)]


def measured(a):
    out = os.path.join(a.out, "bandwidth_measured")
    data = tb.corpus(a.harp, out)
    prof = pl.sweep_base(a, out)
    rows = []
    for bw in [float(b) for b in a.bandwidths.split(",")]:
        tag, cl, job = pl.sweep_setup(a, out, bw)
        plan_file = os.path.join(out, "plan_%s.json" % tag)
        p = tb.plan(a.harp, job, prof, "harp", plan_file)
        got = pl.train_rounds(a, data, [(sched, job, cl, plan_file, os.path.join(out, "run_%s_%s" % (tag, sched)), sched)
                                        for sched in ("harp-1f1b", "1f1b")])
        pred = {sched: got[sched]["predicted_s"] for sched in got}
        m_h, m_s = got["harp-1f1b"]["measured_median_s"], got["1f1b"]["measured_median_s"]
        counts = ",".join(str(st["launch_count"]) for st in p["stages"])
        row = dict(bandwidth_gbps=bw, launch_counts=counts, cuts=",".join(str(st["layers"][0]) for st in p["stages"]),
                   predicted_harp_s=pred["harp-1f1b"], measured_harp_s=m_h, predicted_1f1b_s=pred["1f1b"],
                   measured_1f1b_s=m_s, speedup_measured=m_s / m_h, speedup_predicted=pred["1f1b"] / pred["harp-1f1b"])
        rows.append(row)
        print("measured  %6g Gbit/s  launch counts %-7s  harp-1f1b %.3f s (predicted %.3f)  1f1b %.3f s "
              "(predicted %.3f)  speedup measured %.2fx, predicted %.2fx"
              % (bw, counts, m_h, pred["harp-1f1b"], m_s, pred["1f1b"], row["speedup_measured"],
                 row["speedup_predicted"]), flush=True)
    tb.write_csv(os.path.join(a.out, "bandwidth_measured.csv"), rows)
    tb.line_chart(os.path.join(a.out, "bandwidth_measured.svg"),
                  "HARP's 1F1B over standard 1F1B as the slow link falls (measured on the testbed)",
                  "pool-b <-> pool-c bandwidth (Gbit/s, log scale)", "iteration (s)",
                  [("harp-1f1b measured", [(r["bandwidth_gbps"], r["measured_harp_s"]) for r in rows], False),
                   ("1f1b measured", [(r["bandwidth_gbps"], r["measured_1f1b_s"]) for r in rows], False),
                   ("harp-1f1b predicted", [(r["bandwidth_gbps"], r["predicted_harp_s"]) for r in rows], True),
                   ("1f1b predicted", [(r["bandwidth_gbps"], r["predicted_1f1b_s"]) for r in rows], True)],
                  log_x=True, note="speedups (measured): " + ", ".join(
                      "%g: %.2fx" % (r["bandwidth_gbps"], r["speedup_measured"]) for r in rows))
    return rows


def simulated(a):
    d = os.path.join(a.out, "bandwidth_simulated")
    rows = []
    for cluster, model, k in SIM_SETUPS:
        for bw in SIM_BANDWIDTHS:
            name, job = pl.write_setup(d, cluster, model, k, bandwidth_gbps=bw)
            got = {s: pl.plan_and_simulate(a.harp, job, s, os.path.join(d, "%s.%s.json" % (name, s)),
                                           ["--microbatches", "auto"],
                                           schedules=(None, "1f1b") if s == "harp" else (None,))
                   for s in ("harp", "homogeneous", "uniform")}
            h = got["harp"]
            nan = float("nan")
            row = dict(setup="%s %s" % (cluster, model), bandwidth_gbps=bw, harp_s=h["simulated_s"],
                       harp_as_1f1b_s=h["simulated"]["1f1b"],
                       homogeneous_s=got["homogeneous"]["simulated_s"] if got["homogeneous"]["feasible"] else nan,
                       uniform_s=got["uniform"]["simulated_s"] if got["uniform"]["feasible"] else nan,
                       harp_plan=pl.shape(h["plan"]))
            row["h1f1b_over_1f1b"] = row["harp_as_1f1b_s"] / row["harp_s"]
            row["over_homogeneous"] = row["homogeneous_s"] / row["harp_s"]
            row["over_uniform"] = row["uniform_s"] / row["harp_s"]
            rows.append(row)
            print("simulated %-30s %4g Gbit/s  harp %7.3f s  harp-1f1b over 1f1b %.3fx  over homogeneous %.2fx  "
                  "over uniform %.2fx  %s" % (row["setup"], bw, row["harp_s"], row["h1f1b_over_1f1b"],
                                              row["over_homogeneous"], row["over_uniform"], row["harp_plan"]),
                  flush=True)
    tb.write_csv(os.path.join(a.out, "bandwidth_simulated.csv"), rows)
    series = []
    for setup in sorted({r["setup"] for r in rows}, key=lambda s: [r["setup"] for r in rows].index(s)):
        mine = [r for r in rows if r["setup"] == setup]
        short = setup.split(" ")[1].replace("gpt-", "").upper()
        series.append(("%s: H-1F1B / 1F1B" % short, [(r["bandwidth_gbps"], r["h1f1b_over_1f1b"]) for r in mine],
                       False))
        series.append(("%s: / homogeneous" % short, [(r["bandwidth_gbps"], r["over_homogeneous"]) for r in mine],
                       True))
    tb.line_chart(os.path.join(a.out, "bandwidth_simulated.svg"),
                  "HARP's gains as the cross-pool links slow (simulated at paper scale)",
                  "cross-pool bandwidth (Gbit/s, log scale)", "speedup (x)", series, log_x=True,
                  note="GPT-2.6B: 8 V100 + 2x2 A100; GPT-6.7B: 8 V100 + 2 A100 + 2 A100'; analytic costs")
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "bandwidth", simulated, measured,
            extra=lambda ap: ap.add_argument("--bandwidths", default="0.1,0.05,0.02,0.01,0.005"))
