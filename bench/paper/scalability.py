#!/usr/bin/env python3
"""Planner scalability: the exact search's wall time against the number of GPUs (128 ...
4096) and of layers (62 ... 242), beside the figures the paper's planner reports.

simulated  four pools in a chain (H100, A100-80GB, A100-40GB, V100; 10 Gbit/s between
           them), n nodes of 8 GPUs each, GPT-76B: k = 4 (242 layers) against GPUs, and
           k = 1 ... 4 on 256 GPUs against layers; 128 microbatches of 8, analytic costs.
           Each point is one `harp plan` process (its search time, from the plan, and
           the process's wall time, parsing and cost tables included); each GPU point
           also with `--mixed-stages true` (both searches: without, then with them).
measured   nothing to train: the measured side of planning cost is the profiler's, in
           granularity.py (zero-redundant against per-layer, timed on this machine).

Writes OUT/scalability_simulated.{csv,svg}.

usage: bench/paper/scalability.py [--harp PATH] [--out DIR] [--part ...] [--nodes 1,2,...]
"""
import json
import os
import time

import paper_lib as pl
from paper_lib import tb

POOLS = [("h100", "H100-80GB"), ("a100-80", "A100-80GB"), ("a100-40", "A100-40GB"), ("v100", "V100-32GB")]
# The paper's planner (harp-paper-notes.md §4 and §8; the issue quotes the paper's 133 s
# of DP and 1248 s of profiling): reported beside ours in docs/evaluation.md.
PAPER_DP_S, PAPER_PROFILE_S = 133.0, 1248.0


def cluster_yaml(nodes):
    lines = ["version: 1", "name: four-pools-%d" % (4 * 8 * nodes), "subclusters:"]
    for name, device in POOLS:
        lines.append("  - {name: %s, device: %s, nodes: %d, devices_per_node: 8, intra_node: {bandwidth_gbps: 2400, "
                     "latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}" % (name, device, nodes))
    lines.append("links:")
    for (a, _), (b, _) in zip(POOLS, POOLS[1:]):
        lines.append("  - {between: [%s, %s], bandwidth_gbps: 10, latency_ms: 1}" % (a, b))
    return "\n".join(lines) + "\n"


def point(harp, d, nodes, k, mixed=False):
    cl = pl.write(os.path.join(d, "pools_%d.cluster.yaml" % nodes), cluster_yaml(nodes))
    job = pl.write(os.path.join(d, "gpt76b_%d_k%d.job.yaml" % (nodes, k)), pl.job_yaml(cl, "gpt-76b", 128, 8, k))
    start = time.perf_counter()
    p = json.loads(pl.run([harp, "plan", "--job", job, "--json"]))
    wall = time.perf_counter() - start
    row = dict(gpus=4 * 8 * nodes, layers=60 * k + 2, k=k, search_s=p["search"]["wall_s"], process_s=wall,
               dp_runs=p["search"]["dp_runs"], dp_states=p["search"]["dp_states"],
               stages=len(p["stages"]), iteration_s=p["predicted"]["iteration_s"], mixed_search_s="",
               mixed_iteration_s="")
    if mixed:
        m = json.loads(pl.run([harp, "plan", "--job", job, "--json", "--mixed-stages", "true"]))
        row.update(mixed_search_s=m["search"]["wall_s"], mixed_iteration_s=m["predicted"]["iteration_s"])
    return row


def simulated(a):
    d = os.path.join(a.out, "scalability_simulated")
    rows = []
    for nodes in [int(n) for n in a.nodes.split(",")]:
        rows.append(dict(sweep="gpus", **point(a.harp, d, nodes, 4, mixed=True)))
    for k in (1, 2, 3):  # k = 4 on 256 GPUs is in the GPU sweep
        rows.append(dict(sweep="layers", **point(a.harp, d, 8, k)))
    for r in rows:
        mixed = "" if r["mixed_search_s"] == "" else "  with mixed stages %8.1f ms" % (1e3 * r["mixed_search_s"])
        print("simulated %-6s %5d GPUs  %3d layers  search %8.1f ms (process %6.2f s)  %d DP runs, %d states, "
              "%d stages%s" % (r["sweep"], r["gpus"], r["layers"], 1e3 * r["search_s"], r["process_s"], r["dp_runs"],
                               r["dp_states"], r["stages"], mixed), flush=True)
    tb.write_csv(os.path.join(a.out, "scalability_simulated.csv"), rows)
    by_gpus = [r for r in rows if r["sweep"] == "gpus"]
    by_layers = sorted([r for r in rows if r["layers"] and r["gpus"] == 256], key=lambda r: r["layers"])
    tb.line_chart(os.path.join(a.out, "scalability_simulated.svg"),
                  "Planner search time (s): GPT-76B on four pools (exact search, one process per point)",
                  "GPUs (log scale; layers curve: 62 ... 242 layers on 256 GPUs, plotted at layers x 16)",
                  "search time (s)",
                  [("against GPUs (242 layers)", [(r["gpus"], r["search_s"]) for r in by_gpus], False),
                   ("the same, mixed stages searched too", [(r["gpus"], r["mixed_search_s"]) for r in by_gpus], False),
                   ("against layers (256 GPUs)", [(16 * r["layers"], r["search_s"]) for r in by_layers], True)],
                  log_x=True, note="the paper's planner: %g s of DP and %g s of profiling (GPT scale, see "
                  "docs/evaluation.md)" % (PAPER_DP_S, PAPER_PROFILE_S))
    return rows


if __name__ == "__main__":
    pl.main(__doc__, "scalability", simulated, extra=lambda ap: ap.add_argument("--nodes", default="4,8,16,32,64,128"))
