"""Shared parts of the paper's evaluation (bench/paper/*.py): the two scales every figure
has, the paper's cluster shapes and models, planning and simulating at paper scale, and
the flags every script takes.

  measured   small GPTs trained for real on the emulated testbed (network namespaces,
             shaped links; bench/testbed_lib.py), prediction beside measurement
  simulated  the paper's clusters and models, planned by `harp plan` and timed by
             `harp simulate` (costs: the analytic roofline, or Sailor's measured GPU
             profiles in examples/profiles/sailor where a figure says so)

Each script writes OUT/<figure>.csv and OUT/<figure>.svg (and one per scale where the two
differ in kind), and prints one line per point.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import testbed_lib as tb  # noqa: E402
from bench_util import DEFAULT_HARP, ROOT, run, write, write_csv  # noqa: E402,F401

SAILOR = os.path.join(ROOT, "examples", "profiles", "sailor")

# The authors' network figures (harp-paper-notes.md §8): 200 Gbit/s inside a node,
# 100 Gbit/s between the nodes of a pool, 5 Gbit/s and 1 ms between pools.
INTRA = "intra_node: {bandwidth_gbps: 200, latency_us: 10}"
INTER = "inter_node: {bandwidth_gbps: 100, latency_us: 20}"

# The paper's cluster shapes (§8 "Cluster shapes in configs"): name -> (pools, links).
# pools: (name, device, nodes, devices per node); links: (a, b, Gbit/s, ms).
# A100' of shape (b) is not named by the configs; it is an A100-80GB here.
CLUSTERS = {
    "8V100+2x2A100": ([("v100", "V100-32GB", 1, 8), ("a100", "A100-40GB", 2, 2)],
                      [("v100", "a100", 5, 1)]),
    "8V100+2A100+2A100'": ([("v100", "V100-32GB", 1, 8), ("a100", "A100-40GB", 1, 2),
                            ("a100p", "A100-80GB", 1, 2)],
                           [("v100", "a100", 5, 1), ("a100", "a100p", 5, 0.2)]),
    "2V100+1A100": ([("v100", "V100-32GB", 1, 2), ("a100", "A100-40GB", 1, 1)], [("v100", "a100", 5, 1)]),
    # homogeneous references: every strategy should tie
    "8V100": ([("v100", "V100-32GB", 1, 8)], []),
    "2x2A100": ([("a100", "A100-40GB", 2, 2)], []),
}

GLOBAL_BATCH = 1024  # samples per iteration (the paper's suite; 1M tokens at seq 1024)


def arguments(doc, extra=None):
    """--harp, --out, --part (measured | simulated | all), --steps; plus `extra(parser)`."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "evaluation"))
    ap.add_argument("--part", choices=["all", "measured", "simulated"], default="all")
    ap.add_argument("--steps", type=int, default=6, help="training steps per measured run (the first is not timed)")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of measured runs (their median is reported)")
    if extra:
        extra(ap)
    a = ap.parse_args()
    a.measured = a.part in ("all", "measured")
    a.simulated = a.part in ("all", "simulated")
    return a


def main(doc, name, simulated=None, measured=None, extra=None):
    """A figure script's main: parses the flags, runs the parts --part asks for."""
    a = arguments(doc, extra)
    if a.simulated and simulated:
        simulated(a)
    if a.measured and measured:
        measured(a)
    print("wrote %s/%s_*.csv and .svg" % (a.out, name))


def train_rounds(a, data, runs):
    """Trains every run of `runs` [(label, job, cluster, plan file, out dir, schedule or
    None)] on the testbed, a.repeats rounds, the runs alternating inside each round so
    that slow drifts of this machine's speed hit them alike. Returns label -> the last
    round's summary.json with measured_median_s replaced by the median over rounds (and
    the rounds' figures in "rounds")."""
    got = {label: [] for label, *_ in runs}
    for r in range(a.repeats):
        for label, job, cluster, plan_file, out_dir, schedule in runs:
            got[label].append(tb.train(a.harp, job, cluster, plan_file, data, "%s_%d" % (out_dir, r), schedule))
    result = {}
    for label, summaries in got.items():
        s = dict(summaries[-1])
        s["rounds"] = [x["measured_median_s"] for x in summaries]
        s["measured_median_s"] = tb.median(s["rounds"])
        result[label] = s
    return result


def cluster_yaml(name, pools, links, bandwidth_gbps=None):
    """A GPU cluster file; bandwidth_gbps replaces every cross-pool link's bandwidth."""
    lines = ["version: 1", "name: %s" % name, "subclusters:"]
    for p, device, nodes, per_node in pools:
        lines.append("  - {name: %s, device: %s, nodes: %d, devices_per_node: %d, %s%s}"
                     % (p, device, nodes, per_node, INTRA, (", " + INTER) if nodes > 1 else ""))
    lines.append("links:" if links else "links: []")
    for a, b, gbps, ms in links:
        lines.append("  - {between: [%s, %s], bandwidth_gbps: %g, latency_ms: %g}"
                     % (a, b, bandwidth_gbps if bandwidth_gbps is not None else gbps, ms))
    return "\n".join(lines) + "\n"


def job_yaml(cluster_file, model, microbatches, microbatch_size, granularity=2):
    """model: a preset name ("gpt-2.6b") or a dict of GPT fields."""
    if isinstance(model, str):
        m = "{preset: %s, granularity: %d}" % (model, granularity)  # the preset names its family
    else:
        m = "{family: gpt, %s, granularity: %d}" % (", ".join("%s: %s" % kv for kv in model.items()), granularity)
    return ("version: 1\ncluster: %s\nmodel: %s\nplanner: {strategy: harp, microbatches: %d, microbatch_size: %d}\n"
            % (os.path.abspath(cluster_file), m, microbatches, microbatch_size))


def write_setup(folder, cluster, model, granularity=2, bandwidth_gbps=None, tag=None):
    """Writes the cluster and job files of one paper-scale setup (64 microbatches of the
    global batch; the scripts mostly plan with --microbatches auto), named after the
    cluster, the model and what else sets it apart (the bandwidth, `tag`): "8V100_2x2A100_
    gpt-2.6b_5". Returns (name, job file)."""
    parts = [cluster.replace("+", "_").replace("'", "p"), model]
    parts += [x if isinstance(x, str) else "%g" % x for x in (bandwidth_gbps, tag) if x is not None]
    name = "_".join(parts)
    pools, links = CLUSTERS[cluster]
    cl = write(os.path.join(folder, name + ".cluster.yaml"), cluster_yaml(name, pools, links, bandwidth_gbps))
    job = write(os.path.join(folder, name + ".job.yaml"), job_yaml(cl, model, 64, GLOBAL_BATCH // 64, granularity))
    return name, job


def plan_and_simulate(harp, job, strategy, plan_file, extra=(), schedules=(None,)):
    """Plans (`harp plan --strategy S`, extra flags) and simulates the plan under each of
    `schedules` (None: its own). Returns a dict: feasible, reason, simulated_s per
    schedule, predicted_s (closed form), stages, search_s, the plan; never exits on an
    infeasible plan."""
    import subprocess
    cmd = [harp, "plan", "--job", job, "--strategy", strategy, "--output", plan_file, "--json"] + list(extra)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode == 3:
        return dict(feasible=False, reason=r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "infeasible")
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-3000:]))
    p = json.load(open(plan_file))
    out = dict(feasible=True, plan=p, predicted_s=p["predicted"]["iteration_s"], stages=len(p["stages"]),
               search_s=p.get("search", {}).get("wall_s", 0.0), simulated={})
    for sched in schedules:
        sim = [harp, "simulate", "--plan", plan_file, "--json"] + (["--schedule", sched] if sched else [])
        out["simulated"][sched or p["schedule"]] = json.loads(run(sim))["iteration_s"]
    out["simulated_s"] = out["simulated"][p["schedule"]]
    return out


def shape(p):
    """A plan's stages in one line: cuts, dp x tp and launch counts."""
    return " | ".join("[%d,%d) %dx%d N%d" % (s["layers"][0], s["layers"][1], s["dp"], s["tp"], s["launch_count"])
                      for s in p["stages"])


def fmt_range(values):
    values = [v for v in values if v == v]
    if not values:
        return "-"
    return "%.2f-%.2fx" % (min(values), max(values)) if len(values) > 1 else "%.2fx" % values[0]


SWEEP_POOLS = [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)]


def sweep_base(a, out):
    """The demo's three-pool testbed cluster (0.1 Gbit/s links), its job (16 microbatches
    of 1) and one profile of it, made first: (profile file)."""
    base_cluster = tb.write(os.path.join(out, "cluster_base.yaml"),
                            tb.cluster_yaml("sweep", SWEEP_POOLS, [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.1)]))
    base_job = tb.write(os.path.join(out, "job_base.yaml"), tb.job_yaml(base_cluster, "gpt-testbed", 16, 1, a.steps))
    return tb.profile(a.harp, base_job, os.path.join(out, "profile.json"))


def sweep_setup(a, out, bw, cost=""):
    """The sweep's cluster at `bw` Gbit/s between pool-b and pool-c and its job (`cost`:
    entries added to the job's cost section): (tag, cluster file, job file)."""
    tag = ("%g" % bw).replace(".", "p")
    cl = tb.write(os.path.join(out, "cluster_%s.yaml" % tag),
                  tb.cluster_yaml("sweep-%s" % tag, SWEEP_POOLS, [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", bw)]))
    text = tb.job_yaml(cl, "gpt-testbed", 16, 1, a.steps)
    if cost:
        text = text.replace("cost: {", "cost: {" + cost + ", ")
    return tag, cl, tb.write(os.path.join(out, "job_%s.yaml" % tag), text)

