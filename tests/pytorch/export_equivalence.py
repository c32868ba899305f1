#!/usr/bin/env python3
"""A HARP plan run by PyTorch's own pipeline runtime equals `harp launch` on it.

usage: export_equivalence.py HARP SOURCE_DIR WORK_DIR

A 3-stage plan of a GPT (granularity 4: stage 1 ends inside a block, so a q, k, v and
residual tensor crosses a cut) with dp 2 on the middle stage, 4 ranks: from the same
Hugging Face weights (a harp checkpoint exported by `harp export --to pytorch-pipelining
--checkpoint`) and the same token file, `harp launch ... harp train` and `torchrun
examples/pytorch/train_pipelined.py` on the export train 5 steps in float32, and their
losses agree within 1e-5 under every schedule kind (GPipe, standard 1F1B, harp-1f1b and
the split-backward ZB-H1, ZB-H2 and harp-zb);
a LLaMA of the same layout under ZB-H1 too, and a plan with uneven data-parallel shares
at both ends (3:1 and 1:3, 5 ranks). `harp trace runs` reads both runs' summaries
side by side. harp's lowered lists equal PyTorch's own lowering (_add_send_recv) of the
exported compute lists for all six schedule kinds, on this plan and a 5-stage one. What
the export and the example refuse (a plan without layers, an unknown schedule, a launch
of the wrong size, tensor parallelism in the example) exits with one message.
"""

import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from run_metrics import read_step_metrics  # noqa: E402

TOLERANCE = 1e-5
STEPS = 5
# Every schedule kind: GPipe, standard and HARP's 1F1B, and the split-backward ones.
ALL_KINDS = ("gpipe", "1f1b", "harp-1f1b", "zb-h1", "zb-h2", "harp-zb")


def plan(vocab, family="gpt"):
    """4 ranks: stage 0 on device 0, stage 1 (dp 2) on 1 and 2, stage 2 on 3; slow links,
    so harp-1f1b launches more microbatches than standard 1F1B. GPT tied; LLaMA untied with
    grouped-query attention (2 key/value heads of 4)."""
    model = {"family": family, "name": "custom", "num_blocks": 2, "hidden": 32, "heads": 4, "seq_len": 16,
             "vocab": vocab, "ffn_hidden": 128, "granularity": 4, "tied_embeddings": family == "gpt"}
    if family in ("llama", "lineage"):
        model.update({"family": "llama", "kv_heads": 2, "ffn_hidden": 64, "rope_theta": 10000.0})
    if family == "lineage":  # every part of the LLaMA lineage at once (docs/file_formats.md, "Model")
        model.update({"qkv_bias": True, "qk_norm": True, "head_dim": 12, "sliding_window": 5, "norm_eps": 1e-6,
                      "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8}})
    stage = {"fwd_s": 0.01, "bwd_s": 0.02, "comm_s": 0.03, "crosses_nodes": True}
    return {"version": 1, "microbatches": 6, "microbatch_size": 4, "schedule": "1f1b", "granularity": 4,
            "model_config": model,
            "stages": [dict(stage, layers=[0, 3], devices=[0]),
                       dict(stage, layers=[3, 6], devices=[1, 2], dp=2),
                       dict(stage, layers=[6, 10], devices=[3], comm_s=0.0)]}


def run(cmd, timeout=300, env=None):
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        print(r.stdout)
        sys.exit("FAILED (exit %d): %s" % (r.returncode, " ".join(cmd)))
    return r.stdout






def same_lowering_as_pytorch(harp, work, plan_file, env):
    """harp's lowered lists (schedule.csv) are what PyTorch's own lowering makes of the
    export's compute-only lists (its _add_reduce_grad and _add_send_recv), for every kind."""
    import csv
    from torch.distributed.pipelining.schedules import _Action, _add_reduce_grad, _add_send_recv
    for kind in ALL_KINDS:
        export = os.path.join(work, "lowering-" + kind)
        run([harp, "export", "--plan", plan_file, "--schedule", kind, "--to", "pytorch-pipelining", "-o", export],
            env=env)
        with open(os.path.join(export, "manifest.json")) as fh:
            m = json.load(fh)
        with open(os.path.join(export, "schedule_compute_only.csv")) as fh:
            compute = [[_Action.from_str(a) for a in row] for row in csv.reader(fh)]
        with open(os.path.join(export, "schedule.csv")) as fh:
            ours = [[str(_Action.from_str(a)) for a in row] for row in csv.reader(fh)]
        S = m["num_stages"]
        lowered = _add_send_recv({r: _add_reduce_grad(compute[r], m["microbatches"]) for r in range(S)},
                                 stage_to_rank=lambda s: s, num_stages=S)
        theirs = [[str(a) for a in lowered[r]] for r in range(S)]
        if theirs != ours:
            for r in range(S):
                if theirs[r] != ours[r]:
                    sys.exit("FAILED: %s: stage %d's list differs from PyTorch's lowering:\n harp    %s\n PyTorch %s"
                             % (kind, r, " ".join(ours[r]), " ".join(theirs[r])))
        print("%-9s lowered lists identical to PyTorch's lowering (%d actions)" % (kind, sum(len(r) for r in ours)))


def refused(cmd, code, words, env):
    """`cmd` exits with `code` and says `words` in one message."""
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, env=env)
    if r.returncode != code or any(w not in r.stdout for w in words):
        print(r.stdout)
        sys.exit("FAILED: expected exit %d naming %s" % (code, words))


def refusals(harp, source, work, plan_file, python, env):
    """What the export and the script refuse, each with one message."""
    with open(plan_file) as fh:
        no_layers = json.load(fh)
    for st in no_layers["stages"]:
        del st["layers"]
    bad = os.path.join(work, "no_layers.json")
    with open(bad, "w") as fh:
        json.dump(no_layers, fh)
    refused([harp, "export", "--plan", bad, "--to", "pytorch-pipelining", "-o", os.path.join(work, "x")], 1,
            ["stage 0 lists no layers"], env)
    refused([harp, "export", "--plan", plan_file, "--to", "pytorch-pipelining", "--schedule", "2f2b", "-o",
             os.path.join(work, "x")], 2, ["--schedule 2f2b: unknown"], env)
    refused([harp, "export", "--plan", plan_file, "-o", os.path.join(work, "x")], 2, ["--checkpoint is required"], env)
    # The export's ranks against the launch's: 4 needed, 2 started.
    refused([python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             os.path.join(source, "examples", "pytorch", "train_pipelined.py"), "--export",
             os.path.join(work, "plan-export-1f1b")], 1, ["the plan needs 4 ranks but WORLD_SIZE is 2"], env)
    # Tensor parallelism inside a stage: exported, and refused by the example in one line.
    with open(plan_file) as fh:
        tp = json.load(fh)
    tp["stages"][1].update(dp=1, tp=2)
    tp_file, tp_export = os.path.join(work, "tp.json"), os.path.join(work, "tp-export")
    with open(tp_file, "w") as fh:
        json.dump(tp, fh)
    run([harp, "export", "--plan", tp_file, "--to", "pytorch-pipelining", "-o", tp_export], env=env)
    refused([python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
             os.path.join(source, "examples", "pytorch", "train_pipelined.py"), "--export", tp_export], 1,
            ["stage 1 has tp 2: tensor parallelism inside a stage is not part of this example"], env)


def compare(harp, source, work, p, data, kinds, counts, env):
    """Trains plan `p` with harp launch and with the PyTorch script under each of `kinds`
    from the same weights; returns the largest loss difference (exits on one too large)."""
    name = os.path.splitext(os.path.basename(p))[0]
    common = ["--data", data, "--threads", "1", "--quiet"]
    with open(p) as fh:
        world = str(sum(st.get("dp", 1) * st.get("tp", 1) for st in json.load(fh)["stages"]))
    # The starting weights: one step of harp train, exported with the plan.
    init = os.path.join(work, name + "-init")
    run([harp, "launch", "--nproc", world, "--", harp, "train", "--plan", p, "--steps", "1", "--checkpoint-every", "1",
         "--out", init] + common, env=env)
    run([harp, "export", "--plan", p, "--to", "pytorch-pipelining", "--checkpoint", init, "--output", init + "-export"],
        env=env)
    weights = os.path.join(init + "-export", "weights")
    worst = 0.0
    for kind in kinds:
        export = os.path.join(work, "%s-export-%s" % (name, kind))
        print(run([harp, "export", "--plan", p, "--schedule", kind, "--to", "pytorch-pipelining", "--output", export],
                  env=env).strip())
        with open(os.path.join(export, "manifest.json")) as fh:
            manifest = json.load(fh)
        counts[kind] = [s["launch_count"] for s in manifest["stages"]]
        train = ["--steps", str(STEPS), "--warmup-steps", "2", "--lr", "1e-2", "--init-from", weights] + common
        harp_dir = os.path.join(work, "%s-harp-%s" % (name, kind))
        torch_dir = os.path.join(work, "%s-torch-%s" % (name, kind))
        run([harp, "launch", "--nproc", world, "--", harp, "train", "--plan", p, "--schedule", kind, "--out", harp_dir]
            + train, env=env)
        run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", world,
             os.path.join(source, "examples", "pytorch", "train_pipelined.py"), "--export", export, "--out", torch_dir]
            + train, env=env)
        ours, theirs = read_step_metrics(harp_dir), read_step_metrics(torch_dir)
        if len(ours) != STEPS or len(theirs) != STEPS:
            sys.exit("FAILED: %s: %d harp steps, %d PyTorch steps, expected %d" % (kind, len(ours), len(theirs), STEPS))
        for a, b in zip(ours, theirs):
            diff = abs(a["loss"] - b["loss"])
            worst = max(worst, diff)
            print("%s %-9s step %d: harp loss %.8f, PyTorch %.8f, |diff| %.2e; grad norm %.6f vs %.6f"
                  % (name, kind, a["step"], a["loss"], b["loss"], diff, a["grad_norm"], b["grad_norm"]))
            if not diff <= TOLERANCE:
                sys.exit("FAILED: %s step %d: losses differ by %.3g (> %g)" % (kind, a["step"], diff, TOLERANCE))
        # The losses move: a run that trained nothing would agree trivially.
        if not abs(ours[-1]["loss"] - ours[0]["loss"]) > 1e-2:
            sys.exit("FAILED: %s: the loss did not move over %d steps" % (kind, STEPS))
        print(run([harp, "trace", "runs", harp_dir, torch_dir, "--baseline", os.path.basename(harp_dir)], env=env))
    return worst


def main():
    harp, source, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    python = sys.executable
    vocab = 64
    with open(os.path.join(work, "plan.json"), "w") as fh:
        json.dump(plan(vocab), fh)
    # Mostly a fixed successor rule, so that five steps visibly lower the loss.
    rng = random.Random(7)
    tokens, t = bytearray(), 0
    for _ in range(20000):
        t = (5 * t + 3) % vocab if rng.random() < 0.9 else rng.randrange(vocab)
        tokens += t.to_bytes(2, "little")
    with open(os.path.join(work, "tokens.bin"), "wb") as fh:
        fh.write(tokens)
    p, data = os.path.join(work, "plan.json"), os.path.join(work, "tokens.bin")
    counts = {}
    worst = compare(harp, source, work, p, data, ALL_KINDS, counts, env)
    # LLaMA (RMSNorm, rotary positions, grouped-query attention, SwiGLU, untied head).
    with open(os.path.join(work, "llama.json"), "w") as fh:
        json.dump(plan(vocab, "llama"), fh)
    worst = max(worst, compare(harp, source, work, os.path.join(work, "llama.json"), data, ("zb-h1",), {}, env))
    # The LLaMA lineage's parts: q/k/v biases, q/k norm, head_dim, sliding window, rope scaling.
    with open(os.path.join(work, "lineage.json"), "w") as fh:
        json.dump(plan(vocab, "lineage"), fh)
    worst = max(worst, compare(harp, source, work, os.path.join(work, "lineage.json"), data, ("1f1b",), {}, env))
    # Uneven shares at both ends (replicas of different speeds): stage 0 dp 2 taking 3:1
    # samples, stage 2 dp 2 taking 1:3, so every replica exchanges with the middle one its
    # own slice and the tied embedding's gradient is summed over four ranks; 5 ranks.
    uneven = plan(vocab)
    uneven["stages"][0].update(dp=2, devices=[0, 1], shares=[3, 1])
    uneven["stages"][1].update(dp=1, devices=[2])
    uneven["stages"][2].update(dp=2, devices=[3, 4], shares=[1, 3])
    with open(os.path.join(work, "uneven.json"), "w") as fh:
        json.dump(uneven, fh)
    worst = max(worst, compare(harp, source, work, os.path.join(work, "uneven.json"), data, ("zb-h1",), {}, env))
    refusals(harp, source, work, p, python, env)
    same_lowering_as_pytorch(harp, work, p, env)
    # And a deeper pipeline with more microbatches and uneven stages.
    deep = plan(vocab)
    deep["microbatches"] = 12
    deep["stages"] = [{"fwd_s": 0.01 * (1 + i % 3), "bwd_s": 0.02 * (1 + i % 2), "comm_s": 0.02 if i < 4 else 0.0,
                       "crosses_nodes": i % 2 == 0, "layers": [2 * i, 2 * i + 2], "devices": [i]} for i in range(5)]
    with open(os.path.join(work, "deep.json"), "w") as fh:
        json.dump(deep, fh)
    same_lowering_as_pytorch(harp, work, os.path.join(work, "deep.json"), env)
    if counts["harp-1f1b"] == counts["1f1b"]:
        sys.exit("FAILED: harp-1f1b launches as 1F1B does (%s): the plan does not tell them apart" % counts["1f1b"])
    print("launch counts: %s" % counts)
    print("OK: GPT under %d schedules, LLaMA and uneven shares under zb-h1, the LLaMA lineage's parts under "
          "1F1B, %d steps each, largest loss "
          "difference %.2e (tolerance %g)" % (len(ALL_KINDS), STEPS, worst, TOLERANCE))


if __name__ == "__main__":
    main()
