#!/usr/bin/env python3
"""The simulator's accuracy on the testbed: predicted against measured iteration time over
at least 30 plans, each trained for real through shaped links.

The plans differ in stage count (2 to 4 pools), data and tensor parallelism (a pool of two
devices: the planner chooses dp 2 or tp 2), strategy (harp, homogeneous, uniform: other
cuts), schedule (harp-1f1b, 1f1b, gpipe; a plan is run under each), the slow link's
bandwidth (0.1, 0.05, 0.02, 0.01 Gbit/s) and the model (8 blocks of hidden 256, 4 of
hidden 384). Each cluster is profiled once; every plan's prediction is its simulated
iteration from that profile (what `harp train` prints), set beside the median step
measured on the testbed. Plans that two strategies share (same cuts) are trained once.

The second column, calibrated: the same plan simulated with the stage times measured in
another run of it (under the next schedule of the three; the links, all-reduces and
optimizer steps stay the plan's), as `harp plan --calibrate` would cost it. It separates the errors of
the profile from those of the simulator.

Writes OUT/testbed_accuracy.csv and .svg (predicted against measured, the y = x line and a
+-10% band); prints the median and the worst |error| of both columns.

--reuse reads the runs a previous invocation left in OUT (profiles, plans, summaries)
instead of profiling and training again: the tables and charts are recomputed only.

usage: bench/testbed_accuracy.py [--harp PATH] [--out DIR] [--steps N] [--only SETUP,...] [--reuse]
"""
import json
import os

import testbed_lib as tb

# (name, pools, links, model, microbatches, microbatch size, profile microbatch sizes)
SETUPS = [
    ("three-fast", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.1)], "gpt-testbed", 16, 1, [1]),
    ("three-slow", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)], "gpt-testbed", 16, 1, [1]),
    ("two", [("pool-a", "cpu-a", 1), ("pool-c", "cpu-c", 1)], [("pool-a", "pool-c", 0.02)], "gpt-testbed", 16, 1,
     [1]),
    ("two-dp", [("pool-b", "cpu-b", 2), ("pool-c", "cpu-c", 1)], [("pool-b", "pool-c", 0.05)], "gpt-testbed", 8, 2,
     [1, 2]),
    ("four", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1), ("pool-d", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.05), ("pool-c", "pool-d", 0.02)], "gpt-testbed", 16, 1, [1]),
    ("wide-three", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.02)], "gpt-testbed-wide", 16, 1, [1]),
]
SCHEDULES = ["harp-1f1b", "1f1b", "gpipe"]


def error(predicted, measured):
    return (predicted - measured) / measured


def calibrated_s(harp, plan_file, measured_plan_file, schedule, summary):
    """The plan simulated under `schedule`, with the launch counts its run used (from its
    summary.json), and each stage's forward and backward time as measured in another run
    (measured_plan.json holds those; links, all-reduce and optimizer stay the plan's)."""
    p = json.load(open(plan_file))
    m = json.load(open(measured_plan_file))
    p["schedule"] = schedule
    for stage, measured, memory in zip(p["stages"], m["stages"], summary["memory"]):
        stage["fwd_s"], stage["bwd_s"] = measured["fwd_s"], measured["bwd_s"]
        stage["launch_count"] = memory["launch_count"]
    path = measured_plan_file.replace("measured_plan.json", "calibrated_plan.json")
    tb.write(path, json.dumps(p))
    return tb.simulate(harp, path, schedule)


def main():
    def extra(ap):
        ap.add_argument("--only", default="", help="comma-separated setup names")
        ap.add_argument("--reuse", action="store_true", help="recompute from the runs already in OUT")
    a = tb.arguments(__doc__, extra)
    out = os.path.join(a.out, "testbed_accuracy")
    data = None if a.reuse else tb.corpus(a.harp, out)
    only = set(filter(None, a.only.split(",")))
    rows = []
    for name, pools, links, model, mbs_count, mbs, sizes in SETUPS:
        if only and name not in only:
            continue
        folder = os.path.join(out, name)
        if a.reuse:
            cl, job, prof = (os.path.join(folder, f) for f in ("cluster.yaml", "job.yaml", "profile.json"))
        else:
            cl, job, prof = tb.setup(a.harp, folder, name, pools, links, model, mbs_count, mbs, a.steps, sizes)
        seen = set()
        for strategy in ("harp", "homogeneous", "uniform"):
            plan_file = os.path.join(folder, strategy + ".json")
            p = json.load(open(plan_file)) if a.reuse else tb.plan(a.harp, job, prof, strategy, plan_file, max_tp=2)
            shape = json.dumps([(s["layers"], s["dp"], s["tp"], s["devices"]) for s in p["stages"]])
            if shape in seen:
                continue
            seen.add(shape)
            runs = {}
            for sched in SCHEDULES:
                run_dir = os.path.join(folder, "run_%s_%s" % (strategy, sched))
                s = (json.load(open(os.path.join(run_dir, "summary.json"))) if a.reuse
                     else tb.train(a.harp, job, cl, plan_file, data, run_dir, schedule=sched))
                runs[sched] = (run_dir, s)
            for i, sched in enumerate(SCHEDULES):
                run_dir, s = runs[sched]
                other_dir = runs[SCHEDULES[(i + 1) % len(SCHEDULES)]][0]
                calibrated = calibrated_s(a.harp, plan_file, os.path.join(other_dir, "measured_plan.json"), sched, s)
                measured = s["measured_median_s"]
                row = dict(setup=name, model=model, strategy=strategy, schedule=sched, stages=len(p["stages"]),
                           dp=",".join(str(st["dp"]) for st in p["stages"]),
                           tp=",".join(str(st["tp"]) for st in p["stages"]),
                           cuts=",".join(str(st["layers"][0]) for st in p["stages"]),
                           predicted_s=s["predicted_s"], calibrated_s=calibrated, measured_s=measured,
                           error=error(s["predicted_s"], measured), calibrated_error=error(calibrated, measured))
                rows.append(row)
                print("%-10s %-11s %-9s stages %d dp %-7s tp %-7s predicted %.3f s (%+.1f%%)  calibrated %.3f s "
                      "(%+.1f%%)  measured %.3f s" % (name, strategy, sched, row["stages"], row["dp"], row["tp"],
                                                     row["predicted_s"], 100 * row["error"], calibrated,
                                                     100 * row["calibrated_error"], measured), flush=True)
    tb.write_csv(os.path.join(a.out, "testbed_accuracy.csv"), rows)
    summary = []
    for key in ("error", "calibrated_error"):
        errs = sorted(abs(r[key]) for r in rows)
        summary.append((tb.median(errs), errs[-1], sum(e <= 0.10 for e in errs)))
    note = ("|error| from the profile: median %.1f%%, worst %.1f%%;\ncalibrated: median %.1f%%, worst %.1f%%; "
            "band: +-10%%" % (100 * summary[0][0], 100 * summary[0][1], 100 * summary[1][0], 100 * summary[1][1]))
    label = lambda r: "%s %s %s" % (r["setup"], r["strategy"], r["schedule"])
    tb.scatter_chart(os.path.join(a.out, "testbed_accuracy.svg"),
                     "Simulator accuracy on the testbed: %d plans" % len(rows),
                     [(label(r), r["predicted_s"], r["measured_s"]) for r in rows], note=note,
                     second=[(label(r), r["calibrated_s"], r["measured_s"]) for r in rows],
                     names=("from the profile", "calibrated (another run's stage times)"))
    print("%d plans: %s; within 10%%: %d (profile), %d (calibrated); wrote %s/testbed_accuracy.csv and .svg"
          % (len(rows), note.replace("\n", " "), summary[0][2], summary[1][2], a.out))


if __name__ == "__main__":
    main()
