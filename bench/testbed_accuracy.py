#!/usr/bin/env python3
"""The simulator's accuracy on the testbed: predicted against measured iteration time over
at least 20 different plans, each trained for real through shaped links.

The plans differ in stage count (2 or 3 pools), data parallelism (a pool of two devices,
dp = 2), strategy (harp, homogeneous, uniform: different cuts), schedule (harp-1f1b, 1f1b,
gpipe; a plan is run under each) and the slow link's bandwidth. Each cluster is profiled
once; every plan's prediction is its simulated iteration from that profile (`harp
simulate`), set beside the median step measured by `harp train` on the testbed. Plans that
two strategies share (same cuts) are trained once.

Writes OUT/testbed_accuracy.csv and .svg (predicted against measured, the y = x line and a
+-10% band); prints the median and the worst |error|.

usage: bench/testbed_accuracy.py [--harp PATH] [--out DIR] [--steps N]
"""
import json
import os

import testbed_lib as tb

# (name, pools, links, microbatches, microbatch size, profile microbatch sizes)
SETUPS = [
    ("three-fast", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.1)], 16, 1, [1]),
    ("three-slow", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)], 16, 1, [1]),
    ("two", [("pool-a", "cpu-a", 1), ("pool-c", "cpu-c", 1)], [("pool-a", "pool-c", 0.02)], 16, 1, [1]),
    ("two-dp", [("pool-b", "cpu-b", 2), ("pool-c", "cpu-c", 1)], [("pool-b", "pool-c", 0.05)], 8, 2, [1, 2]),
]
SCHEDULES = ["harp-1f1b", "1f1b", "gpipe"]


def main():
    a = tb.arguments(__doc__)
    out = os.path.join(a.out, "testbed_accuracy")
    data = tb.corpus(a.harp, out)
    rows = []
    for name, pools, links, mbs_count, mbs, sizes in SETUPS:
        cl, job, prof = tb.setup(a.harp, os.path.join(out, name), name, pools, links, "gpt-testbed", mbs_count, mbs,
                                 a.steps, sizes)
        seen = set()
        for strategy in ("harp", "homogeneous", "uniform"):
            plan_file = os.path.join(out, name, strategy + ".json")
            p = tb.plan(a.harp, job, prof, strategy, plan_file)
            shape = json.dumps([(s["layers"], s["dp"], s["devices"]) for s in p["stages"]])
            if shape in seen:
                continue
            seen.add(shape)
            for sched in SCHEDULES:
                s = tb.train(a.harp, job, cl, plan_file, data, os.path.join(out, name, "run_%s_%s" % (strategy, sched)),
                             schedule=sched)
                err = (s["predicted_s"] - s["measured_median_s"]) / s["measured_median_s"]
                row = dict(setup=name, strategy=strategy, schedule=sched, stages=len(p["stages"]),
                           dp=",".join(str(st["dp"]) for st in p["stages"]),
                           cuts=",".join(str(st["layers"][0]) for st in p["stages"]),
                           predicted_s=s["predicted_s"], measured_s=s["measured_median_s"], error=err)
                rows.append(row)
                print("%-10s %-11s %-9s stages %d dp %-5s  predicted %.3f s  measured %.3f s  error %+.1f%%"
                      % (name, strategy, sched, row["stages"], row["dp"], row["predicted_s"], row["measured_s"],
                         100 * err))
    tb.write_csv(os.path.join(a.out, "testbed_accuracy.csv"), rows)
    errs = sorted(abs(r["error"]) for r in rows)
    med, worst = tb.median(errs), errs[-1]
    tb.scatter_chart(os.path.join(a.out, "testbed_accuracy.svg"),
                     "Simulator accuracy on the testbed: %d plans" % len(rows),
                     [("%s %s %s" % (r["setup"], r["strategy"], r["schedule"]), r["predicted_s"], r["measured_s"])
                      for r in rows],
                     note="|error| median %.1f%%, worst %.1f%%; band: +-10%%" % (100 * med, 100 * worst))
    print("%d plans: |error| median %.1f%%, worst %.1f%%; wrote %s/testbed_accuracy.csv and .svg"
          % (len(rows), 100 * med, 100 * worst, a.out))


if __name__ == "__main__":
    main()
