"""Tensor parallelism against data parallelism and one rank on this CPU (not a test): the
same GPT (examples/models/gpt_small_cpu.json), global batch (8 microbatches of 4 x 128
tokens), float32, AdamW and steps, as one-stage plans: tp 1 on one rank, dp 2 and tp 2
on two ranks (harp launch, one thread each). Median step time after the first; the
final losses must agree (the layouts compute the same training).

Writes out/bench_tp/tp_throughput.csv and .svg; prints tokens/s and the ratios.
Run on an otherwise idle machine:  python3 bench/tp_throughput.py [--harp build/src/cli/harp]
"""
import json
import os

from bench_util import ROOT, bench_args, run, write, write_results

MODEL = os.path.join(ROOT, "examples", "models", "gpt_small_cpu.json")
M, MBS = 8, 4
LAYOUTS = [("tp 1 (1 rank)", 1, 1), ("dp 2 (2 ranks)", 2, 1), ("tp 2 (2 ranks)", 1, 2)]


def main():
    a = bench_args("bench_tp", 6)
    tokens = M * MBS * json.load(open(MODEL))["seq_len"]
    rows = []
    for name, dp, tp in LAYOUTS:
        plan = write(os.path.join(a.out, "plan_dp%d_tp%d.json" % (dp, tp)),
                     '{"version": 1, "microbatches": %d, "microbatch_size": %d, "schedule": "1f1b", "stages": '
                     '[{"layers": [0, 6], "dp": %d, "tp": %d, "fwd_s": 1, "bwd_s": 2}]}\n' % (M, MBS, dp, tp))
        out = os.path.join(a.out, "dp%d_tp%d" % (dp, tp))
        run([a.harp, "launch", "--nproc", str(dp * tp), "--", a.harp, "train", "--plan", plan, "--model", MODEL,
             "--steps", str(a.steps), "--data", "synthetic", "--threads", "1", "--out", out, "--quiet"])
        s = json.load(open(os.path.join(out, "summary.json")))
        rows.append({"layout": name, "ranks": dp * tp, "median_step_s": s["measured_median_s"],
                     "tokens_per_s": tokens / s["measured_median_s"], "final_loss": s["final_loss"]})
        print("%-16s %.3f s/step, %.0f tokens/s, final loss %.6f" % (name, s["measured_median_s"],
                                                                   rows[-1]["tokens_per_s"], s["final_loss"]),
              flush=True)
    one = rows[0]
    for r in rows[1:]:
        print("%s / tp 1: %.2fx tokens/s; final loss %+.1e relative" %
              (r["layout"], r["tokens_per_s"] / one["tokens_per_s"], r["final_loss"] / one["final_loss"] - 1))
    write_results(a.out, "tp_throughput", rows, "Training tokens/s, one thread per rank (higher is better)", "layout",
                  "tokens_per_s")


if __name__ == "__main__":
    main()
