#!/usr/bin/env python3
"""End to end against the baselines (the paper's Fig. 7 and 9): iteration time of HARP's
plan, the homogeneous (Alpa-style) and uniform (Megatron-style) plans, and HARP's plan
under standard 1F1B, per cluster and model.

measured   the emulated testbed: three pools (1.5x, 3x, 4.5x slower than this CPU; 0.1 and
           0.01 Gbit/s links) and two pools with dp (two 3x devices + one 4.5x; 0.05
           Gbit/s), two small GPTs. Each strategy's plan is trained for real through the
           shaped links (HARP's under harp-1f1b and again under 1f1b, the baselines under
           1f1b); strategies that produce the same plan are trained once; --repeats
           rounds, alternating, each figure the median over rounds.
simulated  the paper's cluster shapes (paper_lib.CLUSTERS) and GPT-760M ... 6.7B, global
           batch 1024, each strategy with its own best microbatch count (--microbatches
           auto), analytic costs; plus GPT-Neo-2.7B and LLaMA-3-8B from Sailor's measured
           A100-40GB and V100-16GB profiles.

Writes OUT/end_to_end_measured.{csv,svg} and OUT/end_to_end_simulated.{csv,svg}.

usage: bench/paper/end_to_end.py [--harp PATH] [--out DIR] [--part measured|simulated|all] [--steps N]
"""
import json
import os

import paper_lib as pl
from paper_lib import tb

TESTBED = [
    ("three", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)], 16, 1, [1]),
    ("two-dp", [("pool-b", "cpu-b", 2), ("pool-c", "cpu-c", 1)], [("pool-b", "pool-c", 0.05)], 8, 2, [1, 2]),
]
TESTBED_MODELS = ["gpt-testbed", "gpt-testbed-wide"]

# (cluster shape, model, granularity): k = 3 for GPT-6.7B as in the paper, else 2.
PAPER = [
    ("8V100+2x2A100", "gpt-1.3b", 2), ("8V100+2x2A100", "gpt-2.6b", 2), ("8V100+2x2A100", "gpt-6.7b", 3),
    ("8V100+2A100+2A100'", "gpt-2.6b", 2), ("8V100+2A100+2A100'", "gpt-6.7b", 3),
    ("2V100+1A100", "gpt-760m", 2), ("2V100+1A100", "gpt-1.3b", 2),
    ("8V100", "gpt-2.6b", 2), ("2x2A100", "gpt-1.3b", 2),
]
STRATEGIES = ("harp", "homogeneous", "uniform")


def measured(a):
    out = os.path.join(a.out, "end_to_end_measured")
    data = tb.corpus(a.harp, out)
    rows = []
    for model in TESTBED_MODELS:
        for name, pools, links, mbs_count, mbs, sizes in TESTBED:
            d = os.path.join(out, "%s_%s" % (model, name))
            cl, job, prof = tb.setup(a.harp, d, name, pools, links, model, mbs_count, mbs, a.steps, sizes)
            same_as, by_shape = {}, {}
            for strategy in STRATEGIES:
                plan_file = os.path.join(d, strategy + ".json")
                p = tb.plan(a.harp, job, prof, strategy, plan_file)
                key = json.dumps([(s["layers"], s["dp"], s["devices"]) for s in p["stages"]] + [p["schedule"]])
                same_as[strategy] = by_shape.setdefault(key, strategy)
            runs = [(s, job, cl, os.path.join(d, s + ".json"), os.path.join(d, "run_" + s), None)
                    for s in STRATEGIES if same_as[s] == s]
            runs.append(("harp-as-1f1b", job, cl, os.path.join(d, "harp.json"), os.path.join(d, "run_harp_as_1f1b"),
                         "1f1b"))
            got = pl.train_rounds(a, data, runs)
            for s in STRATEGIES:
                got[s] = got[same_as[s]]
            h = got["harp"]
            row = dict(model=model, cluster=name)
            for s in ("harp",) + STRATEGIES[1:] + ("harp-as-1f1b",):
                row[s + "_predicted_s"] = got[s]["predicted_s"]
                row[s + "_measured_s"] = got[s]["measured_median_s"]
            for s in ("homogeneous", "uniform", "harp-as-1f1b"):
                row["over_%s_measured" % s] = got[s]["measured_median_s"] / h["measured_median_s"]
                row["over_%s_predicted" % s] = got[s]["predicted_s"] / h["predicted_s"]
            rows.append(row)
            print("measured  %-17s %-7s harp %.3f s (predicted %.3f)  over homogeneous %.2fx (pred %.2fx)  "
                  "over uniform %.2fx (pred %.2fx)  over its own plan under 1f1b %.2fx (pred %.2fx)"
                  % (model, name, row["harp_measured_s"], row["harp_predicted_s"],
                     row["over_homogeneous_measured"], row["over_homogeneous_predicted"],
                     row["over_uniform_measured"], row["over_uniform_predicted"],
                     row["over_harp-as-1f1b_measured"], row["over_harp-as-1f1b_predicted"]), flush=True)
    tb.write_csv(os.path.join(a.out, "end_to_end_measured.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "end_to_end_measured.svg"),
                 "HARP's speedup on the testbed: measured (predicted beside)",
                 [("%s / %s" % (r["model"].replace("gpt-testbed", "gpt-tb"), r["cluster"]),
                   [r["over_homogeneous_measured"], r["over_homogeneous_predicted"], r["over_uniform_measured"],
                    r["over_uniform_predicted"], r["over_harp-as-1f1b_measured"], r["over_harp-as-1f1b_predicted"]])
                  for r in rows],
                 ["over homogeneous, measured", "over homogeneous, predicted", "over uniform, measured",
                  "over uniform, predicted", "over 1F1B, measured", "over 1F1B, predicted"], "speedup (x)",
                 note="line at 1x: no gain; 1F1B = HARP's own plan under standard 1F1B")
    return rows


# The paper's two heterogeneous cluster shapes with the two models it plans on each.
PAPER_CASES = [("8V100+2x2A100", "gpt-2.6b", 2), ("8V100+2x2A100", "gpt-6.7b", 3),
               ("8V100+2A100+2A100'", "gpt-2.6b", 2), ("8V100+2A100+2A100'", "gpt-6.7b", 3)]


def paper_cases(a, d, variant=None):
    """The simulated settings of the later figures: PAPER_CASES with analytic costs (and,
    with `variant` = (label, extra plan flags), each again with those flags), then the two
    models with Sailor's measured profiles. [(cluster, model, costs label, job, extra
    plan flags)]."""
    cases = []
    for cluster, model, k in PAPER_CASES:
        _, job = pl.write_setup(d, cluster, model, k)
        cases.append((cluster, model, "analytic", job, []))
        if variant:
            cases.append((cluster, model, variant[0], job, list(variant[1])))
    job, prof = sailor_setup(a, d)
    cases.append(("8V100(16GB)+2x2A100", "gpt-neo-2.7b", "Sailor profiles", job, ["--profile", prof]))
    job, prof = sailor_llama_setup(a, d)
    cases.append(("8V100+2x2A100", "llama-3-8b", "Sailor profiles", job, ["--profile", prof]))
    return cases


def sailor_setup(a, d):
    """GPT-Neo-2.7B (32 blocks, hidden 2560, seq 2048) on 8 V100-16GB + 2x2 A100-40GB, costs
    imported from Sailor's measured profiles: (job, profile)."""
    pools = [("v100", "V100-16GB", 1, 8), ("a100", "A100-40GB", 2, 2)]
    cl = pl.write(os.path.join(d, "neo.cluster.yaml"), pl.cluster_yaml("neo", pools, [("v100", "a100", 5, 1)]))
    model = dict(name="gpt-neo-2.7b", num_blocks=32, hidden=2560, heads=20, seq_len=2048, vocab=50257)
    job = pl.write(os.path.join(d, "neo.job.yaml"), pl.job_yaml(cl, model, 64, 2, granularity=1))
    prof = os.path.join(d, "neo_profile.json")
    pl.run([a.harp, "profile", "import", "--format", "sailor", os.path.join(pl.SAILOR, "GPT-Neo-2.7"), "--job", job,
            "--gpu", "A100-40=A100-40GB", "--gpu", "V100-16=V100-16GB", "-o", prof])
    return job, prof


def sailor_llama_setup(a, d):
    """LLaMA-3-8B (seq 8192) on the paper's cluster shape, V100-32GB timed by Sailor's
    V100-16GB measurements (the same chip), A100-40GB by its own: (job, profile)."""
    pools = [("v100", "V100-32GB", 1, 8), ("a100", "A100-40GB", 2, 2)]
    cl = pl.write(os.path.join(d, "llama.cluster.yaml"), pl.cluster_yaml("llama", pools, [("v100", "a100", 5, 1)]))
    job = pl.write(os.path.join(d, "llama.job.yaml"), pl.job_yaml(cl, "llama-3-8b", 64, 1, granularity=1))
    prof = os.path.join(d, "llama_profile.json")
    pl.run([a.harp, "profile", "import", "--format", "sailor", os.path.join(pl.SAILOR, "LLAMA-3-8"), "--job", job,
            "--gpu", "A100-40=A100-40GB", "--gpu", "V100-16=V100-32GB", "-o", prof])
    return job, prof


def simulated(a):
    d = os.path.join(a.out, "end_to_end_simulated")
    cases = []
    for cluster, model, k in PAPER:
        _, job = pl.write_setup(d, cluster, model, k)
        cases.append((cluster, model, "analytic", job, ["--microbatches", "auto"]))
    job, prof = sailor_setup(a, d)
    cases.append(("8V100(16GB)+2x2A100", "gpt-neo-2.7b", "Sailor profiles", job, ["--profile", prof]))
    job, prof = sailor_llama_setup(a, d)
    cases.append(("8V100+2x2A100", "llama-3-8b", "Sailor profiles", job, ["--profile", prof]))
    rows = []
    for cluster, model, costs, job, extra in cases:
        base = job[:-len(".job.yaml")]
        got = {s: pl.plan_and_simulate(a.harp, job, s, "%s.%s.json" % (base, s), extra,
                                       schedules=(None, "1f1b") if s == "harp" else (None,)) for s in STRATEGIES}
        h = got["harp"]
        row = dict(cluster=cluster, model=model, costs=costs)
        row["harp_s"] = h["simulated_s"] if h["feasible"] else float("nan")
        row["harp_plan"] = pl.shape(h["plan"]) if h["feasible"] else h["reason"]
        row["harp_as_1f1b_s"] = h["simulated"]["1f1b"] if h["feasible"] else float("nan")
        for s in STRATEGIES[1:]:
            row[s + "_s"] = got[s]["simulated_s"] if got[s]["feasible"] else float("nan")
            row[s + "_note"] = "" if got[s]["feasible"] else got[s]["reason"][:160]
        for s in ("homogeneous", "uniform", "harp_as_1f1b"):
            row["over_" + s] = row[s + "_s"] / row["harp_s"]
        rows.append(row)
        print("simulated %-20s %-12s harp %7.3f s  over homogeneous %s  over uniform %s  over 1f1b %.2fx   %s"
              % (cluster, model, row["harp_s"],
                 "%.2fx" % row["over_homogeneous"] if row["over_homogeneous"] == row["over_homogeneous"] else "infeasible",
                 "%.2fx" % row["over_uniform"] if row["over_uniform"] == row["over_uniform"] else "infeasible",
                 row["over_harp_as_1f1b"], row["harp_plan"]), flush=True)
    tb.write_csv(os.path.join(a.out, "end_to_end_simulated.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "end_to_end_simulated.svg"),
                 "HARP's speedup at paper scale (simulated; no bar: the baseline's plan does not fit memory)",
                 [("%s %s" % (r["cluster"].replace("+", "+ "), r["model"].replace("gpt-", "")),
                   [r["over_homogeneous"], r["over_uniform"], r["over_harp_as_1f1b"]]) for r in rows],
                 ["over homogeneous (Alpa-style)", "over uniform (Megatron-style)", "over its plan under 1F1B"],
                 "speedup (x)", note="global batch 1024 (GPT-Neo: 128; LLaMA-3-8B: 64 x 8192 tokens), analytic costs but "
                 "GPT-Neo and LLaMA (Sailor's measured profiles); line at 1x", wide=True)
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "end_to_end", simulated, measured)
