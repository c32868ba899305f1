#!/usr/bin/env python3
"""Mixed stages at paper scale (simulated): HARP with mixed stages (`--mixed-stages true`:
a stage whose data-parallel replicas are of two device types, the rest of one pool and
the head of the next, each replica taking a share of every microbatch by its speed)
against HARP without them, every plan timed by `harp simulate`.

Settings: the paper's cluster shapes and models (analytic costs), and a mixed node shape:
servers holding 4 A100-40GB beside 4 V100-32GB on a 200 Gbit/s in-server link, a second
such pair of pools behind 100 Gbit/s, and a pool of 8 V100-32GB behind 5 Gbit/s. Each is
planned with 64 microbatches of the global batch of 1024 and with 32 (fewer, larger ones:
a shorter pipeline pays more there).

Writes OUT/mixed_simulated.csv and .svg (the measured counterpart is
bench/testbed_mixed.py).

usage: bench/paper/mixed.py [--harp PATH] [--out DIR]
"""
import os

import end_to_end as e2e
import paper_lib as pl
from paper_lib import tb

MIXED_NODES = ([("a100", "A100-40GB", 1, 4), ("v100", "V100-32GB", 1, 4), ("a100b", "A100-40GB", 1, 4),
                ("v100b", "V100-32GB", 1, 4), ("far", "V100-32GB", 1, 8)],
               [("a100", "v100", 200, 0.005), ("v100", "a100b", 100, 0.01), ("a100b", "v100b", 200, 0.005),
                ("v100b", "far", 5, 1)])


def shape(p):
    """A plan's stages in one line, a mixed stage with its replicas' shares."""
    def one(s):
        shares = ":".join(map(str, s["shares"])) if s.get("replica_devices") else ""
        return "[%d,%d) %dx%d%s" % (s["layers"][0], s["layers"][1], s["dp"], s["tp"], " mixed " + shares if shares else "")
    return " | ".join(one(s) for s in p["stages"])


def main():
    a = pl.arguments(__doc__)
    if not a.simulated:
        return  # no measured part here: bench/testbed_mixed.py
    d = os.path.join(a.out, "mixed_simulated")
    os.makedirs(d, exist_ok=True)
    cases = [(c, m, j) for c, m, _, j, extra in e2e.paper_cases(a, d) if not extra]
    cl = pl.write(os.path.join(d, "mixed_nodes.cluster.yaml"), pl.cluster_yaml("mixed_nodes", *MIXED_NODES))
    for model in ("gpt-2.6b", "gpt-6.7b"):
        cases.append(("2x(4A100+4V100)+8V100", model,
                      pl.write(os.path.join(d, "mixed_nodes_%s.job.yaml" % model),
                               pl.job_yaml(cl, model, 64, pl.GLOBAL_BATCH // 64, granularity=2))))
    rows = []
    for cluster, model, job in cases:
        for b in (64, 32):
            base = job[:-len(".job.yaml")] + "_b%d" % b
            got = {m: pl.plan_and_simulate(a.harp, job, "harp", "%s.%s.json" % (base, m),
                                           ["--microbatches", str(b), "--recompute", "auto", "--mixed-stages", flag])
                   for m, flag in (("plain", "false"), ("mixed", "true"))}
            row = dict(cluster=cluster, model=model, microbatches=b)
            for m in ("plain", "mixed"):
                g = got[m]
                row[m + "_s"] = g["simulated_s"] if g["feasible"] else float("nan")
                row[m + "_predicted_s"] = g["predicted_s"] if g["feasible"] else float("nan")
                row[m + "_plan"] = shape(g["plan"]) if g["feasible"] else g["reason"][:160]
                row[m + "_search_s"] = g.get("search_s", float("nan"))
            row["speedup"] = row["plain_s"] / row["mixed_s"]
            row["mixed_stage"] = "mixed" in row["mixed_plan"]
            rows.append(row)
            print("%-24s %-9s B=%-3d plain %8.3f s  mixed %8.3f s  %.3fx  search %.2f / %.2f s  %s" % (
                cluster, model, b, row["plain_s"], row["mixed_s"], row["speedup"], row["plain_search_s"],
                row["mixed_search_s"], row["mixed_plan"]), flush=True)
    pl.write_csv(os.path.join(a.out, "mixed_simulated.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "mixed_simulated.svg"),
                 "Mixed stages (--mixed-stages true) against stages of one device type (simulated)",
                 [("%s %s B=%d" % (r["model"], r["cluster"], r["microbatches"]), [r["speedup"]]) for r in rows],
                 ["speedup with mixed stages"], "speedup (x)", wide=True, note="line at 1x: no mixed stage pays")
    print("wrote %s/mixed_simulated.csv and .svg" % a.out)


if __name__ == "__main__":
    main()
