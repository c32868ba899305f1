#!/usr/bin/env python3
"""The Zero-Redundant Profiler, measured side by side in one run:

  profiling   wall time of `harp profile` on GPT-350M-shaped layers (bench/jobs/gpt350m_cpu.yaml,
              sequence 128, microbatch size 1) measuring one layer per signature, and with
              --per-layer (every layer, as a profiler without redundancy removal would)
  stages      `harp profile check`: every stage of a 2-stage plan (examples/jobs/cpu_pair.yaml) and
              a 3-stage plan (bench/jobs/cpu_three.yaml), each made from a fresh profile, run here;
              predicted (the sum of profiled layers) against measured stage time
  iteration   the 2-device CPU stand-in cluster (cpu_pair): the plan made from the profile and the
              plan made from the analytic roofline, each trained for real with 2 ranks (`harp launch
              --emulate`); the plan's predicted iteration against the measured median step

Every figure is measured in this run; --trials repeats the stage and iteration cases (the machine's
speed drifts by 10-20% over minutes, so one trial says little). Writes CSV and an SVG chart.

usage: bench/profile_accuracy.py [--harp PATH] [--out DIR] [--trials N] [--skip-profiling]
"""
import argparse
import csv
import json
import os
import re
import statistics
import time

from bench_util import DEFAULT_HARP, ROOT, corpus, run

PAIR = os.path.join(ROOT, "examples", "jobs", "cpu_pair.yaml")
THREE = os.path.join(ROOT, "bench", "jobs", "cpu_three.yaml")
BIG = os.path.join(ROOT, "bench", "jobs", "gpt350m_cpu.yaml")


def seconds(text):
    """'12.34 ms' / '1.234 s' / '56.7 us' -> seconds."""
    v, unit = text.split()
    return float(v) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def profiling_rows(harp, out):
    rows = []
    for label, extra in (("one layer per signature", []), ("every layer (--per-layer)", ["--per-layer"])):
        path = os.path.join(out, "gpt350m_%s.json" % ("per_layer" if extra else "unique"))
        start = time.perf_counter()
        text = run([harp, "profile", "--job", BIG, "--device", "cpu", "--microbatch-sizes", "1", "-o", path] + extra)
        wall = time.perf_counter() - start
        n = int(re.search(r"measured (\d+) layer", text).group(1))
        print("profiling %-28s %3d layers measured, %.1f s (whole command)" % (label, n, wall))
        rows.append(("profiling", label, n, "", wall, ""))
    return rows


def check_rows(harp, out, job, name, trial):
    prof = os.path.join(out, "%s_profile.json" % name)
    plan = os.path.join(out, "%s_plan.json" % name)
    run([harp, "profile", "--job", job, "-o", prof])
    run([harp, "plan", "--job", job, "--profile", prof, "--output", plan])
    text = run([harp, "profile", "check", "--plan", plan])
    rows = []
    for m in re.finditer(r"^\s+(\d+)\s+(\S+).*?\s(\d[\d.]* [mu]?s)\s+(\d[\d.]* [mu]?s)\s+([-+][\d.]+)%", text, re.M):
        pred, meas = seconds(m.group(3)), seconds(m.group(4))
        err = (pred - meas) / meas
        print("stage     %-28s stage %s: predicted %.2f ms, measured %.2f ms, error %+.1f%%"
              % ("%s trial %d" % (name, trial), m.group(1), pred * 1e3, meas * 1e3, 100 * err))
        rows.append(("stage", "%s stage %s (trial %d)" % (name, m.group(1), trial), pred, meas, "", err))
    return rows


def train_rows(harp, out, trial):
    prof = os.path.join(out, "pair_profile.json")
    rows = []
    run([harp, "profile", "--job", PAIR, "-o", prof])
    data = corpus(harp, out)
    for label, extra in (("profile", ["--profile", prof]), ("analytic", [])):
        plan = os.path.join(out, "pair_plan_%s.json" % label)
        run([harp, "plan", "--job", PAIR, "--output", plan] + extra)
        train_out = os.path.join(out, "train_%s_%d" % (label, trial))
        text = run([harp, "launch", "--nproc", "2", "--emulate", "--", harp, "train", "--plan", plan, "--job", PAIR,
                    "--data", data, "--out", train_out, "--steps", "12"])
        m = re.search(r"predicted (\d[\d.]* [mu]?s)/step by the plan .*measured (\d[\d.]* [mu]?s)", text)
        pred, meas = seconds(m.group(1)), seconds(m.group(2))
        err = (pred - meas) / meas
        with open(plan) as f:
            cuts = " ".join("[%d, %d)" % (st["layers"][0], st["layers"][1]) for st in json.load(f)["stages"])
        print("iteration %-28s %s: predicted %.1f ms, measured %.1f ms (median step), error %+.1f%%"
              % ("%s plan, trial %d" % (label, trial), cuts, pred * 1e3, meas * 1e3, 100 * err))
        rows.append(("iteration", "%s plan %s (trial %d)" % (label, cuts, trial), pred, meas, "", err))
    return rows


def chart(rows, path):
    """Predicted (light) and measured (dark) bars per case, on one linear scale per kind."""
    width, left, bar_h, gap = 900, 330, 9, 10
    cases = [r for r in rows if r[0] != "profiling"]
    prof = [r for r in rows if r[0] == "profiling"]
    height = 70 + len(cases) * (2 * bar_h + gap) + len(prof) * (bar_h + gap) + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
           % (width, height),
           '<text x="10" y="20" font-size="14">HARP profiler: predicted (light) against measured (dark), '
           'and profiling wall time</text>']
    y = 40
    span = width - left - 120
    for kind in ("stage", "iteration"):
        group = [r for r in cases if r[0] == kind]
        if not group:
            continue
        top = max(max(r[2], r[3]) for r in group)
        out.append('<text x="10" y="%d" font-weight="bold">%s time</text>' % (y + 10, kind))
        y += 18
        for r in group:
            out.append('<text x="10" y="%d">%s</text>' % (y + 2 * bar_h - 2, r[1]))
            for k, (v, c) in enumerate(((r[2], "#9ecae1"), (r[3], "#3182bd"))):
                w = span * v / top
                out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (left, y + k * bar_h, w, bar_h, c))
            out.append('<text x="%.1f" y="%d">%.1f / %.1f ms (%+.0f%%)</text>'
                       % (left + span * max(r[2], r[3]) / top + 6, y + 2 * bar_h - 2, r[2] * 1e3, r[3] * 1e3,
                          100 * r[5]))
            y += 2 * bar_h + gap
    if prof:
        top = max(r[4] for r in prof)
        out.append('<text x="10" y="%d" font-weight="bold">profiling wall time, GPT-350M layers (s = 128)</text>'
                   % (y + 10))
        y += 18
        for r in prof:
            out.append('<text x="10" y="%d">%s (%d layers)</text>' % (y + bar_h, r[1], r[2]))
            out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="#55a868"/>'
                       % (left, y, span * r[4] / top, bar_h))
            out.append('<text x="%.1f" y="%d">%.1f s</text>' % (left + span * r[4] / top + 6, y + bar_h, r[4]))
            y += bar_h + gap
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench"))
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--skip-profiling", action="store_true", help="leave out the GPT-350M profiling case")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = [] if a.skip_profiling else profiling_rows(a.harp, a.out)
    for t in range(a.trials):
        rows += check_rows(a.harp, a.out, PAIR, "pair", t)
        rows += check_rows(a.harp, a.out, THREE, "three", t)
        rows += train_rows(a.harp, a.out, t)
    stage_errors = [abs(r[5]) for r in rows if r[0] == "stage"]
    if stage_errors:
        print("stages: median |error| %.1f%%, largest %.1f%% over %d stages"
              % (100 * statistics.median(stage_errors), 100 * max(stage_errors), len(stage_errors)))
    prof = [r for r in rows if r[0] == "profiling"]
    if len(prof) == 2:
        print("profiling: per-layer / zero-redundant wall time = %.1fx (%d against %d layers)"
              % (prof[1][4] / prof[0][4], prof[1][2], prof[0][2]))
    csv_path = os.path.join(a.out, "profile_accuracy.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "case", "predicted_s_or_layers", "measured_s", "wall_s", "error"])
        w.writerows(rows)
    chart(rows, os.path.join(a.out, "profile_accuracy.svg"))
    print("wrote %s and profile_accuracy.svg" % csv_path)


if __name__ == "__main__":
    main()
