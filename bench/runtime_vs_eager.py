"""The runtime against PyTorch on one process (not a test): the same GPT
(examples/models/gpt_small_cpu.json: pre-LayerNorm blocks, fused QKV, GELU tanh, learned
positions, tied embeddings), the same global batch (M microbatches of MBS sequences,
gradient accumulation), AdamW, float32, 1 and 2 intra-op threads. `harp train` runs a
one-stage plan; the PyTorch side is this file's own model, run by
- the PyTorch harp links (the pinned PyPI torch in .venv, MKL): eager, and torch.compile
  in its default mode and in max-autotune-no-cudagraphs (the compiled forward and its
  AOT backward; the compile itself falls in the first steps, which are not counted);
- Debian's python3-torch 1.13 (/usr/bin/python3, OpenBLAS) eager, the earlier baseline,
  with OpenBLAS pinned (it starts one thread per core unless told, so an unpinned "1
  thread" run computes on two) and, at 2 threads, in both ways of using two cores
  (torch's pool or OpenBLAS's); the ratios take its faster one.
Median step time over the steps after the first two; every run sees the same data.

Writes out/bench_eager/runtime_vs_eager.csv and .svg; prints tokens/s and the ratios
(harp / each PyTorch at the same threads; 2 threads / 1 thread for each). Run on an
otherwise idle machine:  python3 bench/runtime_vs_eager.py [--harp build/src/cli/harp]
"""
import json
import os
import subprocess
import sys

from bench_util import DEBIAN_PYTHON, ROOT, TORCH_PYTHON, bar_chart, bench_args, run, write, write_csv

MODEL = os.path.join(ROOT, "examples", "models", "gpt_small_cpu.json")
M, MBS = 8, 4

EAGER = r'''
import json, statistics, sys, time
import torch
import torch.nn.functional as F
cfg = json.load(open(sys.argv[1])); threads, steps, M, MBS = map(int, sys.argv[2:6]); mode = sys.argv[6]
torch.set_num_threads(threads)
torch.manual_seed(0)
h, a, s, V, L = cfg["hidden"], cfg["heads"], cfg["seq_len"], cfg["vocab"], cfg["num_blocks"]
f = 4 * h
def p(*shape, std=0.02):
    return torch.nn.Parameter(torch.randn(*shape) * std)
params = {"wte": p(V, h), "wpe": p(s, h), "lnf_w": torch.nn.Parameter(torch.ones(h)),
          "lnf_b": torch.nn.Parameter(torch.zeros(h))}
for i in range(L):
    params.update({"b%d.%s" % (i, k): v for k, v in {
        "ln1_w": torch.nn.Parameter(torch.ones(h)), "ln1_b": torch.nn.Parameter(torch.zeros(h)),
        "qkv_w": p(3 * h, h), "qkv_b": torch.nn.Parameter(torch.zeros(3 * h)),
        "proj_w": p(h, h), "proj_b": torch.nn.Parameter(torch.zeros(h)),
        "ln2_w": torch.nn.Parameter(torch.ones(h)), "ln2_b": torch.nn.Parameter(torch.zeros(h)),
        "fc1_w": p(f, h), "fc1_b": torch.nn.Parameter(torch.zeros(f)),
        "fc2_w": p(h, f), "fc2_b": torch.nn.Parameter(torch.zeros(h))}.items()})
mask = torch.ones(s, s, dtype=torch.bool).triu(1)
def forward(tokens, targets):
    b = tokens.shape[0]
    x = F.embedding(tokens, params["wte"]) + params["wpe"][:s]
    for i in range(L):
        g = lambda k: params["b%d.%s" % (i, k)]
        y = F.layer_norm(x, (h,), g("ln1_w"), g("ln1_b"), 1e-5)
        q, k, v = F.linear(y, g("qkv_w"), g("qkv_b")).split(h, -1)
        q, k, v = [t.reshape(b, s, a, h // a).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / (h // a) ** 0.5
        att = torch.softmax(att.masked_fill(mask, float("-inf")), -1)
        x = x + F.linear((att @ v).transpose(1, 2).reshape(b, s, h), g("proj_w"), g("proj_b"))
        y = F.layer_norm(x, (h,), g("ln2_w"), g("ln2_b"), 1e-5)
        x = x + F.linear(F.gelu(F.linear(y, g("fc1_w"), g("fc1_b")), approximate="tanh"), g("fc2_w"), g("fc2_b"))
    y = F.layer_norm(x, (h,), params["lnf_w"], params["lnf_b"], 1e-5)
    return F.cross_entropy(F.linear(y, params["wte"]).reshape(-1, V), targets.reshape(-1), reduction="sum")
if mode != "eager":
    forward = torch.compile(forward, mode=None if mode == "default" else mode)
opt = torch.optim.AdamW(params.values(), lr=3e-4, weight_decay=0.1)
times, losses = [], []
gen = torch.Generator().manual_seed(1)
for step in range(steps):
    data = torch.randint(0, V, (M * MBS, s + 1), generator=gen)
    t0 = time.perf_counter()
    opt.zero_grad()
    for m in range(M):
        chunk = data[m * MBS:(m + 1) * MBS]
        loss = forward(chunk[:, :-1], chunk[:, 1:]) / (M * MBS * s)
        loss.backward()
        losses.append(float(loss))
    torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
print(json.dumps({"median_s": statistics.median(times[2:]), "first_s": times[0],
                  "loss": sum(losses[-M:]), "torch": torch.__version__}))
'''


def harp_step_s(harp, out, threads, steps):
    plan = write(os.path.join(out, "one_stage.json"),
                 '{"version": 1, "microbatches": %d, "microbatch_size": %d, "schedule": "1f1b", '
                 '"stages": [{"layers": [0, 6], "fwd_s": 1, "bwd_s": 2}]}\n' % (M, MBS))
    run_dir = os.path.join(out, "harp_t%d" % threads)
    env = dict(os.environ, MASTER_PORT=str(20000 + os.getpid() % 20000))
    run([harp, "train", "--plan", plan, "--model", MODEL, "--steps", str(steps), "--data", "synthetic",
         "--threads", str(threads), "--out", run_dir, "--quiet"], env=env)
    return json.load(open(os.path.join(run_dir, "summary.json")))["measured_median_s"]


def torch_step(python, mode, torch_threads, blas_threads, steps):
    # OpenBLAS starts one thread per core unless told: pin it, or "1 thread" uses two.
    # MKL and torch's OpenMP pool (the pip torch) follow torch.set_num_threads.
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas_threads), OMP_NUM_THREADS=str(torch_threads),
               MKL_NUM_THREADS=str(torch_threads))
    r = subprocess.run([python, "-c", EAGER, MODEL, str(torch_threads), str(steps), str(M), str(MBS), mode],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        sys.exit("PyTorch (%s, %s) failed: %s" % (python, mode, r.stderr[-2000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def torch_runs(threads, steps, have_pip):
    """(system, config, run) of every PyTorch side at `threads` cores, none nesting pools."""
    runs = []
    if have_pip:
        for mode in ("eager", "default", "max-autotune-no-cudagraphs"):
            system = "pytorch-2.11-eager" if mode == "eager" else "pytorch-2.11-compile"
            runs.append((system, "" if mode == "eager" else "mode " + mode,
                         lambda mode=mode: torch_step(TORCH_PYTHON, mode, threads, 1, steps)))
    for t, b in [(1, 1)] if threads == 1 else [(threads, 1), (1, threads)]:
        runs.append(("pytorch-1.13-eager", "torch %d, openblas %d" % (t, b),
                     lambda t=t, b=b: torch_step(DEBIAN_PYTHON, "eager", t, b, steps)))
    return runs


COLORS = {"harp": "#4c72b0", "pytorch-2.11-eager": "#dd8452", "pytorch-2.11-compile": "#c44e52",
          "pytorch-1.13-eager": "#937860"}


def chart(rows, path):
    bars = [("%s, %d thread(s)%s" % (r["system"], r["threads"], (": " + r["config"]) if r["config"] else ""),
             r["tokens_per_s"], COLORS[r["system"]]) for r in rows]
    bar_chart(path, "Training tokens/s on one process (median step; higher is better)", bars)


def main():
    a = bench_args("bench_eager", 8)
    cfg = json.load(open(MODEL))
    tokens = M * MBS * cfg["seq_len"]
    have_pip = os.path.exists(TORCH_PYTHON)
    if not have_pip:
        print("no %s (make installs it): the PyTorch 2.x columns are left out" % TORCH_PYTHON)
    rows = []
    for threads in (1, 2):  # side by side: each group runs back to back
        runs = [("harp", "", lambda: {"median_s": harp_step_s(a.harp, a.out, threads, a.steps), "torch": "harp"})]
        runs += torch_runs(threads, a.steps, have_pip)
        for system, config, step in runs:
            r = step()
            s = r["median_s"]
            rows.append({"system": system, "threads": threads, "config": config, "torch": r["torch"],
                         "median_step_s": s, "first_step_s": r.get("first_s", ""), "tokens_per_s": tokens / s,
                         "last_step_loss": r.get("loss", "")})
            print("%-20s %d thread(s) %-38s %.3f s/step, %6.0f tokens/s%s" %
                  (system, threads, config, s, tokens / s,
                   ", first step %.1f s, last step's loss %.6f" % (r["first_s"], r["loss"]) if "first_s" in r else ""),
                  flush=True)
    by = {}  # the best configuration of each system at each thread count
    for r in rows:
        by[(r["system"], r["threads"])] = max(by.get((r["system"], r["threads"]), 0), r["tokens_per_s"])
    systems = [s for s in COLORS if (s, 1) in by]
    for t in (1, 2):
        for other in systems[1:]:
            print("harp / %s (its best configuration) at %d thread(s): %.2fx" % (other, t, by[("harp", t)] / by[(other, t)]))
    for system in systems:
        print("%s 2 threads / 1 thread: %.2fx" % (system, by[(system, 2)] / by[(system, 1)]))
    write_csv(os.path.join(a.out, "runtime_vs_eager.csv"), rows)
    chart(rows, os.path.join(a.out, "runtime_vs_eager.svg"))
    print("wrote %s/runtime_vs_eager.csv and .svg" % a.out)


if __name__ == "__main__":
    main()
