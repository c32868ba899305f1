#!/usr/bin/env python3
"""HARP against the uniform (Megatron-style) and homogeneous (Alpa-style) plans, measured on
the testbed over several models and clusters.

For each (model, cluster): profile once, plan with each strategy (--max-tp 1), train every
plan for real through the shaped links (each under its own schedule: harp-1f1b for HARP,
1f1b for the baselines), and report the measured speedup of HARP over each baseline beside
the predicted one. Strategies that produce the same plan are trained once and share the
figure. Writes OUT/testbed_strategies.csv and .svg.

usage: bench/testbed_strategies.py [--harp PATH] [--out DIR] [--steps N]
"""
import json
import os

import testbed_lib as tb

CLUSTERS = [
    ("three", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)], 16, 1, [1]),
    ("two-dp", [("pool-b", "cpu-b", 2), ("pool-c", "cpu-c", 1)], [("pool-b", "pool-c", 0.05)], 8, 2, [1, 2]),
]
MODELS = ["gpt-testbed", "gpt-testbed-wide"]


def main():
    a = tb.arguments(__doc__)
    out = os.path.join(a.out, "testbed_strategies")
    data = tb.corpus(a.harp, out)
    rows = []
    for model in MODELS:
        for name, pools, links, mbs_count, mbs, sizes in CLUSTERS:
            d = os.path.join(out, "%s_%s" % (model, name))
            cl, job, prof = tb.setup(a.harp, d, name, pools, links, model, mbs_count, mbs, a.steps, sizes)
            got = {}
            by_shape = {}
            for strategy in ("harp", "homogeneous", "uniform"):
                plan_file = os.path.join(d, strategy + ".json")
                p = tb.plan(a.harp, job, prof, strategy, plan_file)
                shape = json.dumps([(s["layers"], s["dp"], s["devices"]) for s in p["stages"]] + [p["schedule"]])
                if shape not in by_shape:
                    by_shape[shape] = tb.train(a.harp, job, cl, plan_file, data, os.path.join(d, "run_" + strategy))
                got[strategy] = by_shape[shape]
            h = got["harp"]
            row = dict(model=model, cluster=name,
                       harp_predicted_s=h["predicted_s"], harp_measured_s=h["measured_median_s"])
            for base in ("uniform", "homogeneous"):
                b = got[base]
                row[base + "_predicted_s"] = b["predicted_s"]
                row[base + "_measured_s"] = b["measured_median_s"]
                row["speedup_over_%s_measured" % base] = b["measured_median_s"] / h["measured_median_s"]
                row["speedup_over_%s_predicted" % base] = b["predicted_s"] / h["predicted_s"]
            rows.append(row)
            print("%-17s %-7s harp %.3f s (predicted %.3f)  over uniform %.2fx (predicted %.2fx)  "
                  "over homogeneous %.2fx (predicted %.2fx)"
                  % (model, name, row["harp_measured_s"], row["harp_predicted_s"], row["speedup_over_uniform_measured"],
                     row["speedup_over_uniform_predicted"], row["speedup_over_homogeneous_measured"],
                     row["speedup_over_homogeneous_predicted"]))
    tb.write_csv(os.path.join(a.out, "testbed_strategies.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "testbed_strategies.svg"),
                 "HARP's speedup over the baselines, measured on the testbed (predicted beside)",
                 [("%s / %s" % (r["model"], r["cluster"]),
                   [r["speedup_over_uniform_measured"], r["speedup_over_uniform_predicted"],
                    r["speedup_over_homogeneous_measured"], r["speedup_over_homogeneous_predicted"]]) for r in rows],
                 ["over uniform, measured", "over uniform, predicted", "over homogeneous, measured",
                  "over homogeneous, predicted"], "speedup (x)", note="line at 1x: no gain")
    print("wrote %s/testbed_strategies.csv and .svg" % a.out)


if __name__ == "__main__":
    main()
