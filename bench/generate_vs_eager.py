"""`harp generate` against an eager PyTorch loop of the same model (not a test): greedy
decoding with a KV cache on one thread, for the tiny presets (gpt-tiny, llama-tiny) and a
124M-parameter GPT-2 shape (12 blocks, hidden 768, 12 heads, 1024 positions, vocabulary
50257). Each model is a Hugging Face folder written here with random weights (normal
0.02 x 8, so that greedy choices are not ties); `harp generate --hf` reads it, and the
eager side is this file's own PyTorch forward with a cache of torch.cat'ed keys and values
(as Hugging Face's eager attention keeps them), run by the PyTorch harp links (the
pinned PyPI torch in .venv: eager, and torch.compile of the forward in its default mode
with dynamic shapes, warmed up on a first decode of the same length that is not timed;
one such process a model, its compile taking 20-60 s here)
and by Debian's python3-torch 1.13 (eager, OpenBLAS pinned to one thread, the earlier
baseline). Decode speed: new tokens after the first over the time they took, the median
of several runs of each side, alternated; every side also reports whether its greedy
tokens agree with harp's.

Writes out/bench_generate/generate_vs_eager.csv and .svg. Run on an idle machine:
  /usr/bin/python3 bench/generate_vs_eager.py [--harp build/src/cli/harp] [--steps NEW_TOKENS]
"""
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

from bench_util import DEBIAN_PYTHON, TORCH_PYTHON, bench_args, write_results

MODELS = {
    "gpt-tiny": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32, "vocab_size": 256},
    "llama-tiny": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "intermediate_size": 192, "vocab_size": 256,
                   "max_position_embeddings": 32},
    "gpt2-124m": {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
                  "vocab_size": 50257},
}
PROMPT = "The planner "  # byte tokens: ids below 256 in any vocabulary


def shapes(cfg):
    if cfg["model_type"] == "gpt2":
        h, V, s = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
        out = {"transformer.wte.weight": (V, h), "transformer.wpe.weight": (s, h),
               "transformer.ln_f.weight": (h,), "transformer.ln_f.bias": (h,)}
        for i in range(cfg["n_layer"]):
            p = "transformer.h.%d." % i
            out.update({p + "ln_1.weight": (h,), p + "ln_1.bias": (h,), p + "ln_2.weight": (h,),
                        p + "ln_2.bias": (h,), p + "attn.c_attn.weight": (h, 3 * h), p + "attn.c_attn.bias": (3 * h,),
                        p + "attn.c_proj.weight": (h, h), p + "attn.c_proj.bias": (h,),
                        p + "mlp.c_fc.weight": (h, 4 * h), p + "mlp.c_fc.bias": (4 * h,),
                        p + "mlp.c_proj.weight": (4 * h, h), p + "mlp.c_proj.bias": (h,)})
        return out
    h, V, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    out = {"model.embed_tokens.weight": (V, h), "model.norm.weight": (h,), "lm_head.weight": (V, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                    p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                    p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                    p + "mlp.down_proj.weight": (h, f)})
    return out


def write_model(folder, cfg):
    os.makedirs(folder, exist_ok=True)
    full = dict(cfg, rms_norm_eps=1e-5, layer_norm_epsilon=1e-5, rope_theta=10000.0)
    json.dump(full, open(os.path.join(folder, "config.json"), "w"))
    rng = np.random.default_rng(0)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes(cfg).items():
        norm = "ln" in name or "norm" in name
        a = np.ones(shape, np.float32) if norm and name.endswith("weight") else (
            np.zeros(shape, np.float32) if norm else (rng.standard_normal(shape) * 0.16).astype(np.float32))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


EAGER = r'''
import json, math, struct, sys, time
import numpy as np, torch
import torch.nn.functional as F
folder, prompt, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
cfg = json.load(open(folder + "/config.json"))
raw = open(folder + "/model.safetensors", "rb").read()
k = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + k])
w = {name: torch.from_numpy(np.frombuffer(raw[8 + k + e["data_offsets"][0]:8 + k + e["data_offsets"][1]],
                                          dtype=np.float32).reshape(e["shape"]).copy()) for name, e in hdr.items()}
gpt = cfg["model_type"] == "gpt2"
if gpt:
    H, A, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]; G = A
    for i in range(L):  # Conv1D to nn.Linear layout, once
        for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            w["transformer.h.%d.%s.weight" % (i, m)] = w["transformer.h.%d.%s.weight" % (i, m)].t().contiguous()
else:
    H, A, L, G = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"], cfg["num_key_value_heads"]
D = H // A
inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
def rot(x, pos):
    e = torch.outer(torch.arange(pos, pos + x.shape[1], dtype=torch.float32), inv); e = torch.cat((e, e), -1)
    return x * e.cos() + torch.cat((-x[..., D // 2:], x[..., :D // 2]), -1) * e.sin()
def rms(x, g):
    return g * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
cache = [None] * L
def forward(ids, past):
    t = torch.tensor(ids); s = len(ids)
    if gpt: x = w["transformer.wte.weight"][t] + w["transformer.wpe.weight"][past:past + s]
    else: x = w["model.embed_tokens.weight"][t]
    mask = torch.full((s, past + s), float("-inf")).triu(past + 1)
    for i in range(L):
        if gpt:
            p = "transformer.h.%d." % i
            y = F.layer_norm(x, (H,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
            q, kk, v = F.linear(y, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]).split(H, -1)
        else:
            p = "model.layers.%d." % i
            y = rms(x, w[p + "input_layernorm.weight"])
            q, kk, v = (F.linear(y, w[p + "self_attn.%s_proj.weight" % c]) for c in "qkv")
        q = q.view(s, A, D).transpose(0, 1); kk = kk.view(s, G, D).transpose(0, 1); v = v.view(s, G, D).transpose(0, 1)
        if not gpt: q, kk = rot(q, past), rot(kk, past)
        if cache[i] is not None: kk = torch.cat((cache[i][0], kk), 1); v = torch.cat((cache[i][1], v), 1)
        cache[i] = (kk, v)
        if G != A: kk = kk.repeat_interleave(A // G, 0); v = v.repeat_interleave(A // G, 0)
        att = torch.softmax(q @ kk.transpose(-1, -2) / math.sqrt(D) + mask, -1)
        ctx = (att @ v).transpose(0, 1).reshape(s, H)
        if gpt:
            x = x + F.linear(ctx, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
            y = F.layer_norm(x, (H,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
            x = x + F.linear(F.gelu(F.linear(y, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]), approximate="tanh"),
                             w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
        else:
            x = x + F.linear(ctx, w[p + "self_attn.o_proj.weight"])
            y = rms(x, w[p + "post_attention_layernorm.weight"])
            x = x + F.linear(F.silu(F.linear(y, w[p + "mlp.gate_proj.weight"])) * F.linear(y, w[p + "mlp.up_proj.weight"]),
                             w[p + "mlp.down_proj.weight"])
    if gpt: y = F.layer_norm(x[-1:], (H,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], 1e-5); head = w["transformer.wte.weight"]
    else: y = rms(x[-1:], w["model.norm.weight"]); head = w["lm_head.weight"]
    return F.linear(y, head)[0]
if mode == "compile":  # the tensors in, the cache as state: one graph per decode step's shape
    forward = torch.compile(forward, dynamic=True)
ids = [int(c) for c in prompt.encode()]
def decode():
    out = []
    for i in range(L): cache[i] = None
    with torch.no_grad():
        nxt = int(torch.argmax(forward(ids, 0))); out.append(nxt)
        t1 = time.perf_counter()
        for _ in range(n - 1):
            nxt = int(torch.argmax(forward([nxt], len(ids) + len(out) - 1))); out.append(nxt)
        t2 = time.perf_counter()
    return out, (n - 1) / (t2 - t1)
if mode == "compile": decode()  # compiles (not timed)
out, rate = decode()
print(json.dumps({"tokens": out, "tokens_per_s": rate, "torch": torch.__version__}))
'''


SIDES = [("pytorch-2.11-eager", TORCH_PYTHON, "eager"), ("pytorch-2.11-compile", TORCH_PYTHON, "compile"),
         ("pytorch-1.13-eager", DEBIAN_PYTHON, "eager")]


def main():
    a = bench_args("bench_generate", 64)
    rows = []
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    sides = [side for side in SIDES if os.path.exists(side[1])]
    for name, cfg in MODELS.items():
        folder = os.path.join(a.out, name)
        write_model(folder, cfg)
        window = cfg.get("n_positions", cfg.get("max_position_embeddings"))
        n = min(a.steps, window - len(PROMPT.encode()))  # inside the context: every token from the cache
        # The model half of harp generate (harp-train generate-tokens) prints the new ids:
        # compared with each PyTorch's. Its speed line is what harp generate prints. Each side
        # runs `repeats` times, and the median speed counts (a tiny model's 20 tokens take ms).
        repeats = 3 if cfg.get("n_embd", cfg.get("hidden_size")) > 256 else 7
        prompt_ids = " ".join(str(b) for b in PROMPT.encode())
        harp_rates, rates, tokens = [], {side[0]: [] for side in sides}, {}
        for repeat in range(repeats):
            r = subprocess.run([os.path.join(os.path.dirname(a.harp), "harp-train"), "generate-tokens", "--hf", folder,
                                "--temperature", "0", "--max-new-tokens", str(n), "--threads", "1"], input=prompt_ids,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, check=True)
            harp_ids = [int(t) for t in r.stdout.split("\n# ")[0].split()]
            harp_rates.append(float(re.search(r"at ([0-9.]+) tokens/s", r.stdout).group(1)))
            for side, python, mode in sides:
                if mode == "compile" and repeat > 0:
                    continue  # one compiled process a model: its compile takes 20-60 s here
                out = json.loads(subprocess.run([python, "-c", EAGER, folder, PROMPT, str(n), mode],
                                                stdout=subprocess.PIPE, text=True, env=env, check=True).stdout)
                rates[side].append(out["tokens_per_s"])
                tokens[side] = out["tokens"]
        harp_rate = statistics.median(harp_rates)
        row = {"model": name, "new_tokens": n, "harp_tokens_per_s": round(harp_rate, 1)}
        line = "%-11s %4d new tokens: harp %8.1f tokens/s" % (name, n, harp_rate)
        for side, _, _ in sides:
            rate = statistics.median(rates[side])
            same = sum(1 for x, y in zip(harp_ids, tokens[side]) if x == y)
            row.update({side + "_tokens_per_s": round(rate, 1), "ratio_vs_" + side: round(harp_rate / rate, 2),
                        "same_greedy_tokens_" + side: same})
            line += "; %s %8.1f (%.2fx, greedy tokens equal %d of %d)" % (side, rate, harp_rate / rate, same, n)
        rows.append(row)
        print(line, flush=True)
    write_results(a.out, "generate_vs_eager", rows, "Greedy decode on one thread: harp generate / PyTorch " +
                  sides[0][0].split("-")[1] + " eager", "model", "ratio_vs_" + sides[0][0])


if __name__ == "__main__":
    sys.exit(main())
