#!/usr/bin/env python3
"""Re-planning on drift, measured on the testbed (root: network namespaces and tc).

A device drift: the demo's three-pool cluster (examples/clusters/testbed_three.yaml) trains
the demo's GPT under `harp launch --elastic --testbed` twice, with the same drift: after
step --drift-at one pool's devices compute --factor x slower (`harp testbed set
--device-slowdown`), and after step --end-at they recover. A link drift (--link): the same
pools joined pairwise (examples/clusters/testbed_mesh.yaml, the subcluster order searched);
after step --drift-at the link between the first two stages' pools of the first plan (or
--link A,B) carries --factor x less (`harp testbed set --link --bandwidth-gbps`), and after
--end-at it is back. The first run re-plans (--replan-min-gain 0.05), the second only
reports (--replan-min-gain 0). Every figure is measured in the run that prints it; the
predictions are the launcher's (recoveries.jsonl), set beside them.

Writes OUT/NAME_steps.csv (every step of both runs), OUT/NAME.csv (per run: the median step
before, during and after the drift, wall time, detection, restart, predicted against
measured) and OUT/NAME.svg (step times of both runs); NAME is replan_drift, or replan_link.

    sudo python3 bench/replan_drift.py [--steps 120 --drift-at 25 --end-at 100 --pool pool-a --factor 2]
    sudo python3 bench/replan_drift.py --link auto --factor 4
"""
import re
import json
import os
import subprocess
import sys
import time

import testbed_lib as tb

CLUSTERS = os.path.join(tb.ROOT, "examples", "clusters")


def job_yaml(cluster, profile, out, steps, min_gain, fixed_order):
    return ("version: 1\ncluster: %s\n"
            "model: {family: gpt, name: gpt-testbed, num_blocks: 8, hidden: 256, heads: 4, seq_len: 64, vocab: 256,"
            " granularity: 2}\n"
            "cost: {profile: %s}\n"
            "planner: {strategy: harp, microbatches: 16, microbatch_size: 1, fixed_order: %s}\n"
            "training: {steps: %d, lr: 1.0e-3, warmup_steps: 2, threads: 1, out: %s, checkpoint_every: 10,\n"
            "           drift_threshold: 1.5, drift_window: 5, replan_min_gain: %g}\n"
            % (cluster, profile, "true" if fixed_order else "false", steps, out, min_gain))


def link_bandwidth(cluster, pair):
    """The bandwidth_gbps of the link between the two pools in the cluster file."""
    for line in open(cluster):
        m = re.search(r"between: \[([\w-]+), ([\w-]+)\], bandwidth_gbps: ([0-9.eE+-]+)", line)
        if m and sorted(m.group(1, 2)) == sorted(pair):
            return float(m.group(3))
    sys.exit("replan_drift: %s declares no link %s-%s" % (cluster, pair[0], pair[1]))


def first_link(run_dir):
    """The pools of the first plan's first two stages (elastic/plan_0.json)."""
    path = os.path.join(run_dir, "elastic", "plan_0.json")
    try:
        stages = json.load(open(path))["stages"]
        return (stages[0]["subcluster_name"], stages[1]["subcluster_name"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def records(out_dir):
    rows = []
    try:
        with open(os.path.join(out_dir, "metrics.jsonl")) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def steps_done(out_dir):
    return max([r["step"] + 1 for r in records(out_dir) if "step" in r] or [0])


def drift(a, run_dir, on):
    """Starts (on) or ends the drift; returns when, and what it changed."""
    if not a.link:
        tb.run([a.harp, "testbed", "set", "--cluster", a.cluster, "--device-slowdown",
                "%s=%g" % (a.pool, a.factor if on else 1)])
        return time.time(), a.pool
    pair = a.link_pair or first_link(run_dir)
    if pair is None:
        sys.exit("replan_drift: no plan_0.json in %s to take the link from" % run_dir)
    a.link_pair = pair
    gbps = link_bandwidth(a.cluster, pair)
    tb.run([a.harp, "testbed", "set", "--cluster", a.cluster, "--link", "%s-%s" % pair,
            "--bandwidth-gbps", "%g" % (gbps / a.factor if on else gbps)])
    return time.time(), "the link %s-%s" % pair


def one_run(a, name, min_gain, profile, data):
    folder = os.path.join(a.out, name)
    subprocess.run(["rm", "-rf", folder])
    job = tb.write(os.path.join(folder, "job.yaml"), job_yaml(a.cluster, profile, os.path.join(folder, "run"), a.steps,
                                                              min_gain, fixed_order=not a.link))
    cmd = [a.harp, "launch", "--elastic", "--job", job, "--testbed", a.cluster, "--emulate", "--", a.harp, "train",
           "--data", data, "--quiet"]
    log = open(os.path.join(folder, "launch.log"), "w")
    start = time.time()
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    run_dir = os.path.join(folder, "run")
    set_at = end_at = None
    while p.poll() is None:
        done = steps_done(run_dir)
        if set_at is None and done >= a.drift_at:
            when, what = drift(a, run_dir, True)
            set_at = (done, when)
            print("  %s: %s %gx slower after step %d" % (name, what, a.factor, done))
        if set_at is not None and end_at is None and done >= a.end_at:
            when, what = drift(a, run_dir, False)
            end_at = (done, when)
            print("  %s: %s back to normal after step %d" % (name, what, done))
        time.sleep(0.2)
    wall = time.time() - start
    log.close()
    if p.returncode != 0:
        sys.exit("%s: harp launch exited %d; see %s" % (name, p.returncode, log.name))
    if set_at is None or end_at is None:
        sys.exit("%s: the run ended before the drift's steps (--steps %d)" % (name, a.steps))
    drift(a, run_dir, False)
    recs = records(run_dir)
    rec_file = os.path.join(run_dir, "elastic", "recoveries.jsonl")
    decisions = [json.loads(l) for l in open(rec_file)] if os.path.exists(rec_file) else []
    return {"name": name, "wall_s": wall, "set": set_at, "end": end_at, "records": recs, "decisions": decisions}


def last_step_times(recs):
    """step -> iteration_s of the last attempt that ran it (a re-run after a restart wins)."""
    out = {}
    for r in recs:
        if "step" in r:
            out[r["step"]] = r["iteration_s"]
    return out


def phase(times, first, last):
    return tb.median([t for s, t in times.items() if first <= s < last])


def main():
    a = tb.arguments(__doc__, lambda ap: (
        ap.add_argument("--drift-at", type=int, default=25),
        ap.add_argument("--end-at", type=int, default=100),
        ap.add_argument("--pool", default="pool-a"),
        ap.add_argument("--link", default="", help="auto, or A,B (two pools): a link drift on testbed_mesh.yaml"),
        ap.add_argument("--factor", type=float, default=2.0),
        ap.add_argument("--min-gain", type=float, default=0.05),
        ap.add_argument("--profile", default="", help="a profile of the demo's testbed job (default: profile here)")))
    if a.steps == 6:  # the experiments' default: this one needs steps after the drift to pay for a restart
        a.steps = 120
    os.makedirs(a.out, exist_ok=True)
    a.cluster = os.path.join(CLUSTERS, "testbed_mesh.yaml" if a.link else "testbed_three.yaml")
    a.link_pair = tuple(a.link.split(",")) if a.link and a.link != "auto" else None
    if a.link_pair is not None and len(a.link_pair) != 2:
        sys.exit("replan_drift: --link takes auto or two pools, A,B")
    chart = "replan_link" if a.link else "replan_drift"
    if os.geteuid() != 0:
        sys.exit("replan_drift: the testbed needs root (network namespaces, tc)")
    tb.run([a.harp, "testbed", "up", "--cluster", a.cluster])
    data = tb.corpus(a.harp, a.out)
    profile = a.profile or tb.profile(a.harp, os.path.join(tb.ROOT, "examples", "jobs", "testbed_three.yaml"),
                                      os.path.join(a.out, "replan_profile.json"))
    profile = os.path.abspath(profile)
    runs = []
    try:
        for name, gain in (("replan", a.min_gain), ("static", 0.0)):
            print("%s (--replan-min-gain %g): %d steps" % (name, gain, a.steps))
            runs.append(one_run(a, name, gain, profile, data))
    finally:
        subprocess.run([a.harp, "testbed", "down", "--cluster", a.cluster], stdout=subprocess.DEVNULL)

    step_rows, rows, series = [], [], []
    for r in runs:
        times = last_step_times(r["records"])
        for s in sorted(times):
            step_rows.append({"run": r["name"], "step": s, "iteration_s": "%.4f" % times[s]})
        series.append((r["name"], sorted(times.items()), r["name"] == "static"))
        set_step, end_step = r["set"][0], r["end"][0]
        drifts = [x for x in r["records"] if "drift_after_steps" in x]
        first = next((x for x in drifts if x["drift_after_steps"] > set_step), None)
        adopted = [d for d in r["decisions"] if d.get("adopted")]
        d0 = adopted[0] if adopted else (r["decisions"][0] if r["decisions"] else {})
        switch = d0.get("stopped_at_step", end_step) if adopted else end_step
        before = phase(times, 2, set_step)
        old_drift = phase(times, set_step + 2, switch)
        new_drift = phase(times, switch + 1, end_step) if adopted else float("nan")
        after = phase(times, end_step + 12, a.steps)
        row = {
            "run": r["name"], "wall_s": "%.1f" % r["wall_s"], "before_s": "%.3f" % before,
            "drift_old_plan_s": "%.3f" % old_drift, "drift_new_plan_s": "%.3f" % new_drift,
            "after_s": "%.3f" % after,
            "detected_after_steps": (first["drift_after_steps"] - set_step) if first else "",
            "detected_after_s": "%.1f" % (first["wall_unix_s"] - r["set"][1]) if first and "wall_unix_s" in first else "",
            "decisions": len(r["decisions"]), "adopted": len(adopted),
            "restart_s": "%.2f" % d0["restart_s"] if adopted and d0.get("restart_s") is not None else "",
            "predicted_new_s": "%.3f" % d0["estimated_new_s"] if "estimated_new_s" in d0 else "",
            "measured_new_s": "%.3f" % new_drift if adopted else "",
            "error": "%+.1f%%" % (100 * (d0["estimated_new_s"] / new_drift - 1)) if adopted else "",
            "recovered": "%.0f%%" % (100 * (old_drift - new_drift) / (old_drift - before))
            if adopted and old_drift > before else "",
        }
        rows.append(row)
        print("  " + ", ".join("%s %s" % (k, v) for k, v in row.items()))
    tb.write_csv(os.path.join(a.out, chart + "_steps.csv"), step_rows)
    tb.write_csv(os.path.join(a.out, chart + ".csv"), rows)
    what = "the link %s-%s" % a.link_pair if a.link else a.pool
    tb.line_chart(os.path.join(a.out, chart + ".svg"),
                  "Step time with %s %gx slower after step %d, back after step %d" % (what, a.factor, a.drift_at,
                                                                                      a.end_at),
                  "step", "iteration (s)", series,
                  note="replan: harp launch --elastic --replan-min-gain %g; static: the same drift, reported only" % a.min_gain)
    print("wrote %s/%s.csv, %s_steps.csv and %s.svg" % (a.out, chart, chart, chart))


if __name__ == "__main__":
    main()
