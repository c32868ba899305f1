#!/usr/bin/env python3
"""Regenerates the whole evaluation (docs/evaluation.md): every figure's script, the
simulated part first (paper scale, about 2 minutes), then the measured part (the
emulated testbed: needs root and network namespaces for shaped links; about 12 minutes
on 2 cores with the default 2 rounds). Prints each script's lines as they come and the time each part took;
writes OUT/timings.csv. With --docs, copies every chart and CSV into docs/evaluation/.

usage: bench/paper/run_all.py [--harp PATH] [--out DIR] [--part measured|simulated|all] [--docs]
                              [--only end_to_end,bandwidth,...]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench_util import DEFAULT_HARP, ROOT, write_csv  # noqa: E402

# Figure scripts in the order of docs/evaluation.md; scalability and mixed have no measured
# part (mixed stages are measured by bench/testbed_mixed.py).
SCRIPTS = ["end_to_end", "bandwidth", "granularity", "joint", "scalability", "memory", "zero", "zero_bubble",
           "mixed"]
MEASURED = {"end_to_end", "bandwidth", "granularity", "joint", "memory", "zero", "zero_bubble"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "evaluation"))
    ap.add_argument("--part", choices=["all", "measured", "simulated"], default="all")
    ap.add_argument("--only", default=",".join(SCRIPTS))
    ap.add_argument("--repeats", type=int, default=2, help="rounds of each measured run (median reported)")
    ap.add_argument("--docs", action="store_true", help="copy the charts and CSVs into docs/evaluation/")
    a = ap.parse_args()
    chosen = [s for s in SCRIPTS if s in a.only.split(",")]
    parts = ["simulated", "measured"] if a.part == "all" else [a.part]
    rows = []
    for part in parts:
        start = time.perf_counter()
        for script in chosen:
            if part == "measured" and script not in MEASURED:
                continue
            print("\n== %s (%s)" % (script, part), flush=True)
            t0 = time.perf_counter()
            cmd = [sys.executable, os.path.join(HERE, script + ".py"), "--harp", a.harp, "--out", a.out,
                   "--part", part]
            if part == "measured":
                cmd += ["--repeats", str(a.repeats)]
            r = subprocess.run(cmd)
            if r.returncode != 0:
                sys.exit("%s --part %s failed (%d)" % (script, part, r.returncode))
            rows.append(dict(script=script, part=part, seconds=round(time.perf_counter() - t0, 1)))
        total = time.perf_counter() - start
        rows.append(dict(script="(all)", part=part, seconds=round(total, 1)))
        print("\n%s part: %.1f min" % (part, total / 60), flush=True)
    os.makedirs(a.out, exist_ok=True)
    write_csv(os.path.join(a.out, "timings.csv"), rows)
    if a.docs:
        dest = os.path.join(ROOT, "docs", "evaluation")
        os.makedirs(dest, exist_ok=True)
        for name in sorted(os.listdir(a.out)):
            if name.endswith((".svg", ".csv")):
                shutil.copy(os.path.join(a.out, name), os.path.join(dest, name))
        print("copied the charts and CSVs into %s" % dest)


if __name__ == "__main__":
    main()
