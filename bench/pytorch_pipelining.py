"""One plan, two runtimes (not a test): `harp launch ... harp train` and PyTorch's own
pipeline runtime (torch.distributed.pipelining under torchrun, examples/pytorch/
train_pipelined.py on `harp export --to pytorch-pipelining`), side by side with the plan's
prediction, on the demo's job (examples/jobs/cpu_pair.yaml: a GPT of 4 blocks, hidden 256,
on two CPU ranks, the second an emulated device 3x slower).

The plan comes from a profile measured here (harp profile, then harp plan --profile), as
in `make demo`; both runtimes start from the same weights (one harp step, exported) and
read the same data, under harp-1f1b and standard 1F1B, each run --emulate'd, alternating
which runtime goes first. Reports each run's median step (the steps after the first),
the prediction beside it, and the largest loss difference between the runtimes.

Writes out/bench/pytorch_pipelining.csv and .svg:
    python3 bench/pytorch_pipelining.py [--harp build/src/cli/harp] [--steps 20] [--repeats 2]
"""
import argparse
import json
import os
import statistics
import sys

from bench_util import ROOT, TORCH_PYTHON, DEFAULT_HARP, bar_chart, corpus, run, write_csv

JOB = os.path.join(ROOT, "examples", "jobs", "cpu_pair.yaml")
SCRIPT = os.path.join(ROOT, "examples", "pytorch", "train_pipelined.py")
SCHEDULES = ("harp-1f1b", "1f1b")

sys.path.insert(0, os.path.dirname(SCRIPT))
from run_metrics import read_step_metrics  # noqa: E402


def losses(run_dir):
    return [j["loss"] for j in read_step_metrics(run_dir)]


def simulated(harp, plan, kind, times, path, env):
    """The plan's iteration under `kind` with its stages' (fwd, bwd) replaced by `times`."""
    with open(plan) as fh:
        p = json.load(fh)
    for st, (f, b) in zip(p["stages"], times):
        st["fwd_s"], st["bwd_s"] = f, b
        st.pop("bwd_weight_s", None)
    p.pop("predicted", None)
    with open(path, "w") as fh:
        json.dump(p, fh)
    return json.loads(run([harp, "simulate", "--plan", path, "--schedule", kind, "--json"], env=env))["iteration_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench"))
    a = ap.parse_args()
    work = os.path.join(a.out, "pytorch_pipelining")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    harp = a.harp
    data = corpus(harp, work)
    profile, plan = os.path.join(work, "profile.json"), os.path.join(work, "plan.json")
    print("profiling and planning the demo's job here")
    run([harp, "profile", "--job", JOB, "-o", profile], env=env)
    run([harp, "plan", "--job", JOB, "--profile", profile, "--output", plan], env=env)
    init = os.path.join(work, "init")
    run([harp, "launch", "--nproc", "2", "--", harp, "train", "--plan", plan, "--data", data,
         "--steps", "1", "--checkpoint-every", "1", "--out", init, "--quiet"], env=env)
    flags = ["--data", data, "--steps", str(a.steps), "--lr", "1e-3", "--warmup-steps", "4", "--threads", "1",
             "--emulate", "--quiet"]
    rows = []
    for kind in SCHEDULES:
        export = os.path.join(work, "export-" + kind)
        run([harp, "export", "--plan", plan, "--schedule", kind, "--to", "pytorch-pipelining", "--output", export,
             "--checkpoint", init], env=env)
        weights = os.path.join(export, "weights")
        measured = {"harp": [], "pytorch": []}
        compute = {"harp": [], "pytorch": []}
        worst = 0.0
        for rep in range(a.repeats):
            order = ("harp", "pytorch") if rep % 2 == 0 else ("pytorch", "harp")
            dirs = {}
            for runtime in order:
                d = dirs[runtime] = os.path.join(work, "%s-%s-run%d" % (kind, runtime, rep))
                if runtime == "harp":
                    run([harp, "launch", "--nproc", "2", "--emulate", "--", harp, "train", "--plan", plan,
                         "--schedule", kind, "--init-from", weights, "--out", d] + flags, env=env)
                else:
                    run([TORCH_PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                         SCRIPT, "--export", export, "--init-from", weights, "--out", d] + flags, env=env)
                with open(os.path.join(d, "summary.json")) as fh:
                    s = json.load(fh)
                measured[runtime].append(s["measured_median_s"])
                predicted = s["predicted_s"]
                if runtime == "harp":
                    with open(os.path.join(d, "measured_plan.json")) as fh:
                        stages = json.load(fh)["stages"]
                    compute["harp"].append([(st["fwd_s"], st["bwd_s"]) for st in stages])
                else:
                    compute["pytorch"].append(list(zip(s["measured_fwd_s"], s["measured_bwd_s"])))
            worst = max([worst] + [abs(x - y) for x, y in zip(losses(dirs["harp"]), losses(dirs["pytorch"]))])
        for runtime in ("harp", "pytorch"):
            m = statistics.median(measured[runtime])
            times = [(statistics.median(c[i][0] for c in compute[runtime]),
                      statistics.median(c[i][1] for c in compute[runtime])) for i in range(len(compute[runtime][0]))]
            own = simulated(harp, plan, kind, times, os.path.join(work, "%s-%s-measured-plan.json" % (kind, runtime)),
                            env)
            rows.append({"schedule": kind, "runtime": runtime, "predicted_s": round(predicted, 4),
                         "measured_s": round(m, 4), "error_pct": round(100 * (predicted - m) / m, 1),
                         "predicted_from_measured_stages_s": round(own, 4),
                         "error_from_measured_stages_pct": round(100 * (own - m) / m, 1),
                         "runs": len(measured[runtime]), "max_loss_diff": "%.2e" % worst})
            print("%-9s %-7s predicted %.1f ms (profile), measured %.1f ms (median of %d): error %+.1f%%; predicted "
                  "from this run's measured stage times %.1f ms: error %+.1f%%" % (
                      kind, runtime, 1000 * predicted, 1000 * m, len(measured[runtime]), rows[-1]["error_pct"],
                      1000 * own, rows[-1]["error_from_measured_stages_pct"]))
        print("%-9s largest loss difference between the runtimes %.2e" % (kind, worst))
        for runtime in ("harp", "pytorch"):
            per_stage = ", ".join("stage %d fwd %.1f / bwd %.1f ms" % (i, 1000 * statistics.median(c[i][0] for c in
                                                                                              compute[runtime]),
                                                                     1000 * statistics.median(c[i][1] for c in
                                                                                              compute[runtime]))
                                  for i in range(len(compute[runtime][0])))
            print("%-9s %-7s compute per microbatch: %s" % (kind, runtime, per_stage))
        h, p = rows[-2]["measured_s"], rows[-1]["measured_s"]
        print("%-9s PyTorch pipelining / harp: %.2fx the step time" % (kind, p / h))
    write_csv(os.path.join(a.out, "pytorch_pipelining.csv"), rows)
    bars = []
    for r in rows:
        bars.append(("%s %s measured (ms)" % (r["schedule"], r["runtime"]), 1000 * r["measured_s"],
                     "#4c72b0" if r["runtime"] == "harp" else "#dd8452"))
    for kind in SCHEDULES:
        r = next(r for r in rows if r["schedule"] == kind)
        bars.append(("%s predicted (ms)" % kind, 1000 * r["predicted_s"], "#999999"))
    bar_chart(os.path.join(a.out, "pytorch_pipelining.svg"),
              "One plan, two runtimes: step time, harp and torch.distributed.pipelining", bars)
    print("wrote %s/pytorch_pipelining.csv and .svg" % a.out)


if __name__ == "__main__":
    main()
