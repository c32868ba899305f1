"""The checkpoint write time the asynchronous writer hides (not a test): the same GPT
(examples/models/gpt_small_cpu.json, float32, one rank, one thread), a checkpoint every
4 steps (longer than a write here), once with `--async-checkpoints false` and once with
the default. Per checkpoint, rank 0's write time (serialise, SHA-256, fsync, rename) and what the step waited for it
(the copy of the state when asynchronous, the whole write when not), and the median step
of each run.

Writes out/bench_ckpt/async_checkpoint.csv and .svg; prints the hidden fraction.
Run on an otherwise idle machine:  python3 bench/async_checkpoint.py [--harp build/src/cli/harp]
"""
import json
import os

from bench_util import ROOT, bench_args, run, write, write_results

MODEL = os.path.join(ROOT, "examples", "models", "gpt_small_cpu.json")


def main():
    a = bench_args("bench_ckpt", 13)
    plan = write(os.path.join(a.out, "plan.json"),
                 '{"version": 1, "microbatches": 2, "microbatch_size": 2, "schedule": "1f1b", "stages": '
                 '[{"layers": [0, 6], "dp": 1, "fwd_s": 1, "bwd_s": 2}]}\n')
    rows = []
    for mode in ("false", "true"):
        out = os.path.join(a.out, "async_" + mode)
        run([a.harp, "train", "--async-checkpoints", mode, "--plan", plan, "--model", MODEL, "--steps", str(a.steps),
             "--data", "synthetic", "--threads", "1", "--checkpoint-every", "4", "--out", out, "--quiet"])
        s = json.load(open(os.path.join(out, "summary.json")))
        cks = s["checkpoints"]
        blocked = sum(c["blocked_s"] for c in cks) / len(cks)
        written = sum(c["write_s"] for c in cks) / len(cks)
        rows.append({"writer": "asynchronous" if mode == "true" else "synchronous", "checkpoints": len(cks),
                     "mean_write_s": written, "mean_step_waited_s": blocked, "mean_step_waited_ms": 1e3 * blocked,
                     "median_step_s": s["measured_median_s"], "final_loss": s["final_loss"]})
        print("%-12s %d checkpoints: write %.3f s, the step waited %.3f s; median step %.3f s" %
              (rows[-1]["writer"], len(cks), written, blocked, s["measured_median_s"]), flush=True)
    sync, asyn = rows
    print("hidden: %.3f of %.3f s per checkpoint (%.0f%%); final losses equal: %s" %
          (asyn["mean_write_s"] - asyn["mean_step_waited_s"], asyn["mean_write_s"],
           100 * (1 - asyn["mean_step_waited_s"] / asyn["mean_write_s"]), sync["final_loss"] == asyn["final_loss"]))
    write_results(a.out, "async_checkpoint", rows, "Milliseconds a step waits per checkpoint (lower is better)",
                  "writer", "mean_step_waited_ms")


if __name__ == "__main__":
    main()
