#!/usr/bin/env python3
"""Whole-process time of the planning CLI, side by side in one run (issue: the planning
CLI must not pay for libtorch). Measures, for each `harp` binary given (for example the
build before and after a change):

  help      harp --help
  demo      harp plan --job examples/jobs/demo.yaml
  sweep     the OPT-350M measured profiles (examples/profiles/sailor) on 128 A100 +
            128 V100 (examples/clusters/a100_v100_256.yaml), one cost table per microbatch
            size, global batch 512: one `harp plan` process per table (the only way before),
            and one process given every table (--costs ... --global-batch) where supported.

Median of --repeat runs each. Writes CSV and an SVG bar chart.

usage: bench/plan_process.py --harp NAME=PATH [--harp NAME=PATH ...] [--out DIR] [--repeat N]
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "examples", "profiles", "sailor")
CLUSTER = os.path.join(ROOT, "examples", "clusters", "a100_v100_256.yaml")
SIZES = [1, 2, 4]  # microbatch sizes profiled on both the A100-40 and the V100-16
GLOBAL_BATCH = 512


def run_s(cmd):
    start = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if r.returncode not in (0, 3):
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr.decode()))
    return elapsed


def median_s(cmds, repeat):
    """Median over `repeat` runs of the total time of running every command once."""
    return statistics.median(sum(run_s(c) for c in cmds) for _ in range(repeat))


def make_tables(out):
    """One cost table per microbatch size from the Sailor files, by `harp profile import`."""
    harp = os.path.join(ROOT, "build", "src", "cli", "harp")
    job = os.path.join(ROOT, "examples", "jobs", "opt350_sailor.yaml")
    tables = []
    for m in SIZES:
        path = os.path.join(out, "opt350_mbs%d.json" % m)
        subprocess.run([harp, "profile", "import", "--format", "sailor", os.path.join(PROFILES, "OPT-350"),
                        "--job", job, "--gpu", "A100-40=A100-40GB", "--gpu", "V100-16=V100-16GB",
                        "--as", "cost-table", "--microbatch-size", str(m), "-o", path],
                       stdout=subprocess.DEVNULL, check=True)
        tables.append((m, path))
    return tables


def supports_many_tables(harp):
    r = subprocess.run([harp, "plan", "--help"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return b"--global-batch" in r.stdout


def bar_chart(rows, path):
    """Horizontal bars on a log scale, one per (binary, case), labelled with the time."""
    import math
    width, left, bar_h, gap = 760, 300, 22, 8
    height = 50 + len(rows) * (bar_h + gap)
    lo, hi = math.log10(min(r[2] for r in rows) / 2), math.log10(max(r[2] for r in rows) * 2)
    span = width - left - 90
    def x(v):
        return left + span * (math.log10(v) - lo) / (hi - lo)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
           % (width, height),
           '<text x="10" y="20" font-size="14">Whole-process time of harp plan (median, log scale)</text>']
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    names = sorted({r[0] for r in rows}, key=[r[0] for r in rows].index)
    for i, (name, case, secs) in enumerate(rows):
        y = 40 + i * (bar_h + gap)
        c = colors[names.index(name) % len(colors)]
        out.append('<text x="10" y="%d">%s: %s</text>' % (y + 15, name, case))
        out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (left, y, x(secs) - left, bar_h, c))
        out.append('<text x="%.1f" y="%d">%.1f ms</text>' % (x(secs) + 6, y + 15, secs * 1e3))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--harp", action="append", required=True, help="NAME=PATH of a harp binary")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench"))
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tables = make_tables(a.out)
    demo = os.path.join(ROOT, "examples", "jobs", "demo.yaml")
    rows = []
    for spec in a.harp:
        name, harp = spec.split("=", 1)
        cases = [("help", [[harp, "--help"]]),
                 ("demo job", [[harp, "plan", "--job", demo]]),
                 ("sweep: %d processes" % len(tables),
                  [[harp, "plan", "--cluster", CLUSTER, "--costs", t, "--microbatches", str(GLOBAL_BATCH // m),
                    "--allow-idle-devices"] for m, t in tables])]
        if supports_many_tables(harp):
            one = [harp, "plan", "--cluster", CLUSTER, "--global-batch", str(GLOBAL_BATCH), "--allow-idle-devices"]
            for _, t in tables:
                one += ["--costs", t]
            cases.append(("sweep: 1 process, %d tables" % len(tables), [one]))
        for case, cmds in cases:
            secs = median_s(cmds, a.repeat)
            rows.append((name, case, secs))
            print("%-10s %-28s %9.1f ms" % (name, case, secs * 1e3), flush=True)
    csv_path = os.path.join(a.out, "plan_process.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["binary", "case", "median_s"])
        w.writerows(rows)
    bar_chart(rows, os.path.join(a.out, "plan_process.svg"))
    print("wrote %s and plan_process.svg" % csv_path)


if __name__ == "__main__":
    main()
