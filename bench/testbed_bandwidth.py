#!/usr/bin/env python3
"""HARP's 1F1B against standard 1F1B, measured on the testbed as the slow link falls.

The emulated three-pool cluster of the demo (examples/clusters/testbed_three.yaml: device
types 1.5x, 3x and 4.5x slower than this CPU, one device each), its pool-b <-> pool-c link
swept from 0.1 Gbit/s down to 0.005 Gbit/s. This machine's compute is about two orders of
magnitude slower than a GPU's, so the paper's 10 -> 3 Gbit/s sweep maps to links this much
slower: at 0.01 Gbit/s one activation of the demo's GPT (32 KiB) takes about as long on the
link as a stage's forward (about 13 ms), as a GPT-2.7B activation does at 3 Gbit/s on V100s.

At each bandwidth HARP plans (from one profile, made first), and that plan is trained for
real through the shaped links twice: under HARP's 1F1B (its launch counts) and under standard
1F1B. Runs alternate between the two schedules (--repeats rounds), so slow drifts of this
machine's speed hit both alike; each figure is the median step time of the median round.

Writes OUT/testbed_bandwidth.csv and .svg.

usage: bench/testbed_bandwidth.py [--harp PATH] [--out DIR] [--repeats N] [--bandwidths 0.1,0.05,...]
"""
import os

import testbed_lib as tb


def main():
    a = tb.arguments(__doc__, lambda ap: (ap.add_argument("--repeats", type=int, default=1),
                                          ap.add_argument("--bandwidths", default="0.1,0.05,0.02,0.01,0.005")))
    out = os.path.join(a.out, "testbed_bandwidth")
    data = tb.corpus(a.harp, out)
    pools = [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)]
    base_cluster = tb.write(os.path.join(out, "cluster_base.yaml"),
                            tb.cluster_yaml("sweep", pools, [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.1)]))
    base_job = tb.write(os.path.join(out, "job_base.yaml"), tb.job_yaml(base_cluster, "gpt-testbed", 16, 1, a.steps))
    prof = tb.profile(a.harp, base_job, os.path.join(out, "profile.json"))
    rows = []
    for bw in [float(b) for b in a.bandwidths.split(",")]:
        tag = ("%g" % bw).replace(".", "p")
        cl = tb.write(os.path.join(out, "cluster_%s.yaml" % tag),
                      tb.cluster_yaml("sweep-%s" % tag, pools, [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", bw)]))
        job = tb.write(os.path.join(out, "job_%s.yaml" % tag), tb.job_yaml(cl, "gpt-testbed", 16, 1, a.steps))
        plan_file = os.path.join(out, "plan_%s.json" % tag)
        p = tb.plan(a.harp, job, prof, "harp", plan_file)
        got = {"harp-1f1b": [], "1f1b": []}
        pred = {}
        for r in range(a.repeats):
            for sched in ("harp-1f1b", "1f1b"):
                s = tb.train(a.harp, job, cl, plan_file, data, os.path.join(out, "run_%s_%s_%d" % (tag, sched, r)),
                             schedule=sched)
                got[sched].append(s["measured_median_s"])
                pred[sched] = s["predicted_s"]
        m_h, m_s = tb.median(got["harp-1f1b"]), tb.median(got["1f1b"])
        counts = ",".join(str(st["launch_count"]) for st in p["stages"])
        row = dict(bandwidth_gbps=bw, launch_counts=counts, cuts=",".join(str(st["layers"][0]) for st in p["stages"]),
                   predicted_harp_s=pred["harp-1f1b"], measured_harp_s=m_h, predicted_1f1b_s=pred["1f1b"],
                   measured_1f1b_s=m_s, speedup_measured=m_s / m_h, speedup_predicted=pred["1f1b"] / pred["harp-1f1b"])
        rows.append(row)
        print("%6g Gbit/s  launch counts %-7s  harp-1f1b %.3f s (predicted %.3f)  1f1b %.3f s (predicted %.3f)  "
              "speedup measured %.2fx, predicted %.2fx" % (bw, counts, m_h, pred["harp-1f1b"], m_s, pred["1f1b"],
                                                          row["speedup_measured"], row["speedup_predicted"]))
    tb.write_csv(os.path.join(a.out, "testbed_bandwidth.csv"), rows)
    tb.line_chart(os.path.join(a.out, "testbed_bandwidth.svg"),
                  "HARP's 1F1B over standard 1F1B as the slow link falls (measured on the testbed)",
                  "pool-b <-> pool-c bandwidth (Gbit/s, log scale)", "iteration (s)",
                  [("harp-1f1b measured", [(r["bandwidth_gbps"], r["measured_harp_s"]) for r in rows], False),
                   ("1f1b measured", [(r["bandwidth_gbps"], r["measured_1f1b_s"]) for r in rows], False),
                   ("harp-1f1b predicted", [(r["bandwidth_gbps"], r["predicted_harp_s"]) for r in rows], True),
                   ("1f1b predicted", [(r["bandwidth_gbps"], r["predicted_1f1b_s"]) for r in rows], True)],
                  log_x=True, note="speedups (measured): " + ", ".join(
                      "%g: %.2fx" % (r["bandwidth_gbps"], r["speedup_measured"]) for r in rows))
    print("wrote %s/testbed_bandwidth.csv and .svg" % a.out)


if __name__ == "__main__":
    main()
