#!/usr/bin/env python3
"""Mixed stages on the testbed (issue: mixed device types in a stage): HARP with mixed
stages (`--mixed-stages true`: a stage whose data-parallel replicas are of two device
types, each taking a share of every microbatch by its speed) against HARP without them,
each plan trained for real through the testbed's shaped links, predicted beside measured.

The cluster: one fast device (cpu-a, emulated 1.5x slower than this CPU) beside two
devices 2x slower (cpu-b, 3x), the two pools joined by a fast link, and a third pool of
one device (cpu-c, 4.5x) behind a slow one. Setups vary the link between the first two
pools and how the global batch of 8 is cut into microbatches:
  fast-b1   f-s 10 Gbit/s, 1 microbatch of 8  (the search takes a mixed stage)
  fast-b4   f-s 10 Gbit/s, 4 microbatches of 2
  slow-b1   f-s 0.05 Gbit/s, 1 microbatch of 8 (the all-reduce over it would cost more)
Where the search with mixed stages returns the same plan as without, the plan is trained
once and the ratio is 1 by construction (reported so).

Writes OUT/testbed_mixed.csv and .svg: per setup, predicted and measured iteration of
both plans and the speedups.

    /usr/bin/python3 bench/testbed_mixed.py [--harp build/src/cli/harp] [--steps 6] [--repeats 2]
"""
import json
import os

import testbed_lib as tb

SETUPS = [
    # name, f-s Gbit/s, microbatches, microbatch size
    ("fast-b1", 10, 1, 8),
    ("fast-b4", 10, 4, 2),
    ("slow-b1", 0.05, 1, 8),
]
POOLS = [("pool-f", "cpu-a", 1), ("pool-s", "cpu-b", 2), ("pool-x", "cpu-c", 1)]
MODEL = "gpt-testbed"


def plan(harp, job, profile, path, mixed):
    tb.run([harp, "plan", "--job", job, "--profile", profile, "--max-tp", "1", "--mixed-stages",
            "true" if mixed else "false", "--output", path])
    return json.load(open(path))


def shape(p):
    return "|".join("%s%s" % (s["layers"], ":".join(map(str, s.get("shares", [s["dp"]])))) for s in p["stages"])


def main():
    a = tb.arguments(__doc__, lambda ap: ap.add_argument("--repeats", type=int, default=2))
    out = os.path.join(a.out, "testbed_mixed")
    data = tb.corpus(a.harp, out)
    # One profile serves every setup: same device types, same model, sizes 1 to 8.
    cl0 = tb.write(os.path.join(out, "profile_cluster.yaml"),
                   tb.cluster_yaml("mixed", POOLS, [("pool-f", "pool-s", 10), ("pool-s", "pool-x", 0.1)]))
    job0 = tb.write(os.path.join(out, "profile_job.yaml"), tb.job_yaml(cl0, MODEL, 1, 8, a.steps))
    profile = tb.profile(a.harp, job0, os.path.join(out, "profile.json"), list(range(1, 9)))
    rows = []
    for name, gbps, b, mbs in SETUPS:
        folder = os.path.join(out, name)
        cl = tb.write(os.path.join(folder, "cluster.yaml"),
                      tb.cluster_yaml(name, POOLS, [("pool-f", "pool-s", gbps), ("pool-s", "pool-x", 0.1)]))
        job = tb.write(os.path.join(folder, "job.yaml"), tb.job_yaml(cl, MODEL, b, mbs, a.steps))
        plans = {m: plan(a.harp, job, profile, os.path.join(folder, "%s.json" % m), m == "mixed")
                 for m in ("plain", "mixed")}
        same = shape(plans["plain"]) == shape(plans["mixed"])
        measured, predicted, loss = {}, {}, {}
        for m in ("plain",) if same else ("plain", "mixed"):
            runs = [tb.train(a.harp, job, cl, os.path.join(folder, "%s.json" % m), data,
                             os.path.join(folder, "run_%s_%d" % (m, r))) for r in range(a.repeats)]
            measured[m] = tb.median([s["measured_median_s"] for s in runs])
            predicted[m] = runs[0]["predicted_s"]
            loss[m] = runs[0]["final_loss"]
        if same:
            measured["mixed"], predicted["mixed"], loss["mixed"] = measured["plain"], predicted["plain"], loss["plain"]
        row = dict(setup=name, link_gbps=gbps, microbatches=b, microbatch_size=mbs,
                   plain_plan=shape(plans["plain"]), mixed_plan=shape(plans["mixed"]), same_plan=same,
                   plain_predicted_s=predicted["plain"], plain_measured_s=measured["plain"],
                   mixed_predicted_s=predicted["mixed"], mixed_measured_s=measured["mixed"],
                   predicted_speedup=predicted["plain"] / predicted["mixed"],
                   measured_speedup=measured["plain"] / measured["mixed"],
                   plain_error=measured["plain"] / predicted["plain"] - 1,
                   mixed_error=measured["mixed"] / predicted["mixed"] - 1,
                   loss_rel_diff=abs(loss["plain"] - loss["mixed"]) / abs(loss["plain"]))
        rows.append(row)
        print("%-8s plain %s  mixed %s\n         predicted %.3f -> %.3f s (%.2fx)  measured %.3f -> %.3f s (%.2fx)  "
              "errors %+.1f%% / %+.1f%%  final losses differ by %.1e%s"
              % (name, row["plain_plan"], row["mixed_plan"], predicted["plain"], predicted["mixed"],
                 row["predicted_speedup"], measured["plain"], measured["mixed"], row["measured_speedup"],
                 100 * row["plain_error"], 100 * row["mixed_error"], row["loss_rel_diff"],
                 "  (same plan: trained once)" if same else ""), flush=True)
    tb.write_csv(os.path.join(a.out, "testbed_mixed.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "testbed_mixed.svg"),
                 "Mixed stages on the testbed: speedup over HARP without them",
                 [(r["setup"], [r["predicted_speedup"], r["measured_speedup"]]) for r in rows],
                 ["predicted", "measured"], "speedup (x)",
                 note="one cpu-a beside two 2x slower cpu-b, a slow link to one cpu-c; global batch 8")
    print("wrote %s/testbed_mixed.csv and .svg" % a.out)


if __name__ == "__main__":
    main()
