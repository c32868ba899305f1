"""harp against PyTorch on one GPU (scripts/gpu_check.sh; not a test): the same model, the
same global batch (M microbatches of MBS sequences, gradient accumulation), bf16 autocast
over float32 master weights, AdamW with clipping at 1.0, on the same GPU, one after the
other.

- harp: a one-stage plan on a one-GPU cluster, `harp train --device cuda`. Its
  summary.json gives the median step, tokens/s and MFU, and the plan's predicted step and
  memory beside the measured ones (the caching allocator's peak).
- PyTorch 2.11: this file's own model written as a PyTorch user writes it now
  (F.scaled_dot_product_attention, torch.optim.AdamW(fused=True), autocast to bf16),
  eager and torch.compile (default mode; its compile falls in the uncounted first steps).

Two models: GPT-350M (24 blocks, hidden 1024, 16 heads, sequence 1024, vocabulary 51200,
tied) and a LLaMA-1B shape (16 blocks, hidden 2048, 32 heads, 8 key/value heads, ffn 8192,
sequence 2048, vocabulary 128256, untied; LLaMA 3.2 1B's). A model's MFU for PyTorch is
harp's MFU times the tokens/s ratio (the same FLOPs per token).

--dry-run: the same steps on the CPU with tiny shapes in float32, eager only unless
--compile is given (make test runs it: the script's own logic, before a GPU runs it).
Writes OUT/gpu_vs_pytorch.csv, .svg and a per-model summary; prints the table. Exits 1
when a run fails, naming it.
"""
import argparse
import json
import os
import subprocess
import sys

from bench_util import DEFAULT_HARP, ROOT, bar_chart, write, write_csv

MODELS = {
    "gpt-350m": dict(family="gpt", num_blocks=24, hidden=1024, heads=16, kv_heads=16, ffn_hidden=4096,
                     seq_len=1024, vocab=51200, tied=True, microbatches=4, microbatch_size=4),
    "llama-1b": dict(family="llama", num_blocks=16, hidden=2048, heads=32, kv_heads=8, ffn_hidden=8192,
                     seq_len=2048, vocab=128256, tied=False, rope_theta=500000.0, microbatches=4,
                     microbatch_size=2),
}
DRY_MODELS = {
    "gpt-tiny": dict(family="gpt", num_blocks=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, seq_len=32,
                     vocab=256, tied=True, microbatches=2, microbatch_size=2),
    "llama-tiny": dict(family="llama", num_blocks=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=192, seq_len=32,
                       vocab=256, tied=False, rope_theta=10000.0, microbatches=2, microbatch_size=2),
}

# The PyTorch side, run in its own process (one model and mode per process, so one run's
# cached memory and compiled graphs do not meet the next). argv: config json, mode,
# steps, device, dtype. Prints one JSON line: median step seconds, tokens/s, peak memory.
TORCH_SIDE = r'''
import json, statistics, sys, time
import torch
import torch.nn.functional as F
cfg = json.loads(sys.argv[1]); mode, steps, device, dtype = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
torch.manual_seed(0)
L, h, a, g, f, s, V = (cfg[k] for k in ("num_blocks", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab"))
M, B = cfg["microbatches"], cfg["microbatch_size"]
llama, d = cfg["family"] == "llama", h // a
dev = torch.device(device)
def p(*shape, std=0.02):
    return torch.nn.Parameter(torch.randn(*shape, device=dev) * std)
ones = lambda n: torch.nn.Parameter(torch.ones(n, device=dev))
zeros = lambda n: torch.nn.Parameter(torch.zeros(n, device=dev))
P = {"wte": p(V, h), "lnf_w": ones(h)}
if not llama: P.update({"wpe": p(s, h), "lnf_b": zeros(h)})
if not cfg["tied"]: P["lm"] = p(V, h)
for i in range(L):
    b = "b%d." % i
    if llama:
        P.update({b + "ln1": ones(h), b + "q": p(h, h), b + "k": p(g * d, h), b + "v": p(g * d, h), b + "o": p(h, h),
                  b + "ln2": ones(h), b + "gate": p(f, h), b + "up": p(f, h), b + "down": p(h, f)})
    else:
        P.update({b + "ln1_w": ones(h), b + "ln1_b": zeros(h), b + "qkv_w": p(3 * h, h), b + "qkv_b": zeros(3 * h),
                  b + "proj_w": p(h, h), b + "proj_b": zeros(h), b + "ln2_w": ones(h), b + "ln2_b": zeros(h),
                  b + "fc1_w": p(f, h), b + "fc1_b": zeros(f), b + "fc2_w": p(h, f), b + "fc2_b": zeros(h)})
if llama:
    inv = cfg["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.outer(torch.arange(s, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], -1)
    COS, SIN = ang.cos().float().to(dev), ang.sin().float().to(dev)
def rms(x, w):
    y = x.float()
    return w * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)
def rope(x):
    rot = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * COS.to(x.dtype) + rot * SIN.to(x.dtype)
def forward(tokens, targets):
    n = tokens.shape[0]
    x = F.embedding(tokens, P["wte"])
    if not llama: x = x + P["wpe"][:s]
    for i in range(L):
        w = lambda k: P["b%d.%s" % (i, k)]
        if llama:
            y = rms(x, w("ln1"))
            q = F.linear(y, w("q")).view(n, s, a, d).transpose(1, 2)
            k = F.linear(y, w("k")).view(n, s, g, d).transpose(1, 2)
            v = F.linear(y, w("v")).view(n, s, g, d).transpose(1, 2)
            o = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=g != a)
            x = x + F.linear(o.transpose(1, 2).reshape(n, s, h), w("o"))
            y = rms(x, w("ln2"))
            x = x + F.linear(F.silu(F.linear(y, w("gate"))) * F.linear(y, w("up")), w("down"))
        else:
            y = F.layer_norm(x, (h,), w("ln1_w"), w("ln1_b"), 1e-5)
            q, k, v = (t.view(n, s, a, d).transpose(1, 2) for t in F.linear(y, w("qkv_w"), w("qkv_b")).split(h, -1))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + F.linear(o.transpose(1, 2).reshape(n, s, h), w("proj_w"), w("proj_b"))
            y = F.layer_norm(x, (h,), w("ln2_w"), w("ln2_b"), 1e-5)
            x = x + F.linear(F.gelu(F.linear(y, w("fc1_w"), w("fc1_b")), approximate="tanh"), w("fc2_w"), w("fc2_b"))
    y = rms(x, P["lnf_w"]) if llama else F.layer_norm(x, (h,), P["lnf_w"], P["lnf_b"], 1e-5)
    logits = F.linear(y, P["wte"] if cfg["tied"] else P["lm"])
    return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1), reduction="sum")
if mode == "compile":
    forward = torch.compile(forward)
opt = torch.optim.AdamW(P.values(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), fused=True)
low = dtype == "bfloat16"
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
if dev.type == "cuda": torch.cuda.reset_peak_memory_stats()
gen = torch.Generator().manual_seed(1)
times = []
for step in range(steps):
    data = torch.randint(0, V, (M * B, s + 1), generator=gen).to(dev)
    sync()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=False)
    for m in range(M):
        chunk = data[m * B:(m + 1) * B]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=low):
            loss = forward(chunk[:, :-1], chunk[:, 1:]) / (M * B * s)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(P.values(), 1.0, foreach=True)
    opt.step()
    sync()
    times.append(time.perf_counter() - t0)
median = statistics.median(times[2:] if len(times) > 3 else times)
peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
print(json.dumps({"median_s": median, "tokens_per_s": M * B * s / median, "peak_bytes": peak}))
'''


def job_text(name, cfg, args, out):
    if args.dry_run:
        cluster = write(os.path.join(out, "one_cpu.yaml"),
                        "version: 1\nname: one-cpu\nsubclusters:\n"
                        "  - {name: cpu, device: cpu, nodes: 1, devices_per_node: 1,\n"
                        "     intra_node: {bandwidth_gbps: 100, latency_us: 5}}\n")
    else:
        cluster = os.path.join(ROOT, "examples", "clusters", "one_h200.yaml")
    model = {k: cfg[k] for k in ("family", "num_blocks", "hidden", "heads", "ffn_hidden", "seq_len", "vocab")}
    model.update({"granularity": 1, "name": name, "tied_embeddings": cfg["tied"]})
    if cfg["family"] == "llama":
        model.update({"kv_heads": cfg["kv_heads"], "rope_theta": cfg["rope_theta"]})
    return ("version: 1\ncluster: %s\nmodel: %s\nplanner: {strategy: harp, microbatches: %d, microbatch_size: %d}\n"
            "training: {steps: %d, dtype: %s, device: %s, lr: 3.0e-4, warmup_steps: 2, out: %s}\n"
            % (cluster, json.dumps(model), cfg["microbatches"], cfg["microbatch_size"], args.steps, args.dtype,
               args.device, os.path.join(out, "harp_" + name)))


def step(what, cmd, timeout):
    """Runs cmd; returns its output, or None after printing why it failed."""
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print("FAILED: %s: timed out after %d s" % (what, timeout))
        return None
    if r.returncode != 0:
        print("FAILED: %s: exit %d\n%s" % (what, r.returncode, r.stdout[-3000:]))
        return None
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--python", default=sys.executable, help="the PyTorch to compare with")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU, float32")
    ap.add_argument("--compile", action="store_true", help="in a dry run, torch.compile too")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per run")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "gpu_vs_pytorch"))
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)  # the job file names its cluster and output by these paths
    args.device, args.dtype = ("cpu", "float32") if args.dry_run else ("cuda", "bfloat16")
    args.steps = args.steps or (4 if args.dry_run else 8)
    modes = ["eager", "compile"] if (args.compile or not args.dry_run) else ["eager"]
    os.makedirs(args.out, exist_ok=True)
    rows, bars, failed = [], [], []
    for name, cfg in (DRY_MODELS if args.dry_run else MODELS).items():
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        job = write(os.path.join(out, "job.yaml"), job_text(name, cfg, args, out))
        plan = os.path.join(out, "plan.json")
        planned = step("%s: harp plan" % name, [args.harp, "plan", "--job", job, "--output", plan], args.timeout)
        if planned is None or step("%s: harp train" % name, [args.harp, "train", "--plan", plan, "--job", job],
                                   args.timeout) is None:
            failed.append(name + " harp")
            continue
        summary = json.load(open(os.path.join(out, "harp_" + name, "summary.json")))
        tokens = cfg["microbatches"] * cfg["microbatch_size"] * cfg["seq_len"]
        harp_s = summary["measured_median_s"]
        harp_tps = tokens / harp_s
        mfu = summary.get("mfu") or 0.0
        memory = summary["memory"][0] if summary.get("memory") else {}
        row = {"model": name, "device": args.device, "dtype": args.dtype, "tokens_per_step": tokens,
               "harp_step_s": harp_s, "harp_tokens_per_s": harp_tps, "harp_mfu": mfu,
               "predicted_step_s": summary.get("predicted_s") or 0.0,
               "step_error": summary.get("error") or 0.0,
               "harp_peak_bytes": memory.get("measured_peak_bytes", 0.0),
               "harp_reserved_bytes": memory.get("measured_reserved_bytes", 0.0),
               "predicted_bytes": memory.get("predicted_bytes", 0.0)}
        bars.append(("%s harp" % name, harp_tps, "#c44e52"))
        for mode in modes:
            got = step("%s: PyTorch %s" % (name, mode),
                       [args.python, "-c", TORCH_SIDE, json.dumps(cfg), mode, str(args.steps), args.device,
                        args.dtype], args.timeout)
            if got is None:
                failed.append("%s PyTorch %s" % (name, mode))
                continue
            theirs = json.loads(got.strip().splitlines()[-1])
            row["torch_%s_tokens_per_s" % mode] = theirs["tokens_per_s"]
            row["torch_%s_mfu" % mode] = mfu * theirs["tokens_per_s"] / harp_tps
            row["torch_%s_peak_bytes" % mode] = theirs["peak_bytes"]
            row["harp_over_%s" % mode] = harp_tps / theirs["tokens_per_s"]
            bars.append(("%s PyTorch %s" % (name, mode), theirs["tokens_per_s"], "#4c72b0"))
        rows.append(row)
        gib = 2.0 ** 30
        print("%s (%s, %s): harp %.0f tokens/s, MFU %.1f%%; step %.4f s against %.4f s predicted (%+.1f%%); "
              "memory %.2f GiB peak (%.2f reserved) against %.2f GiB predicted"
              % (name, args.device, args.dtype, harp_tps, 100 * mfu, harp_s, row["predicted_step_s"],
                 100 * row["step_error"], row["harp_peak_bytes"] / gib, row["harp_reserved_bytes"] / gib,
                 row["predicted_bytes"] / gib))
        for mode in modes:
            if "harp_over_%s" % mode in row:
                print("  PyTorch %s: %.0f tokens/s, MFU %.1f%%, peak %.2f GiB; harp / PyTorch %s = %.2fx"
                      % (mode, row["torch_%s_tokens_per_s" % mode], 100 * row["torch_%s_mfu" % mode],
                         row["torch_%s_peak_bytes" % mode] / gib, mode, row["harp_over_%s" % mode]))
    if rows:
        write_csv(os.path.join(args.out, "gpu_vs_pytorch.csv"), rows)
        bar_chart(os.path.join(args.out, "gpu_vs_pytorch.svg"),
                  "tokens/s on one %s (%s), harp and PyTorch 2.11" % (args.device, args.dtype), bars)
    if failed:
        print("FAILED runs: " + ", ".join(failed))
        return 1
    print("all runs done; CSV and SVG in " + args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
