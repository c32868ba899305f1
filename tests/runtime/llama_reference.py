"""An independent LLaMA forward in PyTorch, as Hugging Face's LlamaForCausalLM computes
it, for the runtime's check (llama_forward_test.cc).

Reads a Hugging Face LLaMA folder (config.json and model.safetensors, parsed here with
struct and numpy: no safetensors package) and token ids, and writes the logits
(float32, [b, s, V]) and the summed cross-entropy against the targets.

usage: llama_reference.py MODEL_DIR TOKENS TARGETS B S LOGITS_OUT LOSS_OUT
(TOKENS, TARGETS: raw little-endian int64, b x s each)
"""
import json
import struct
import sys

import numpy as np
import torch


def read_safetensors(path, dtype=np.float32):
    """Every tensor of a safetensors file, converted to `dtype` (generate_reference.py too)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    dtypes = {"F32": np.float32, "F64": np.float64, "F16": np.float16}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        a = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=dtypes[e["dtype"]])
        out[name] = torch.from_numpy(a.reshape(e["shape"]).astype(dtype))
    return out


def rms_norm(x, w, eps):
    v = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(v + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def main():
    folder, tokens_path, targets_path, b, s, logits_out, loss_out = sys.argv[1:8]
    b, s = int(b), int(s)
    cfg = json.load(open(folder + "/config.json"))
    w = read_safetensors(folder + "/model.safetensors")
    tokens = torch.from_numpy(np.fromfile(tokens_path, dtype="<i8").reshape(b, s))
    targets = torch.from_numpy(np.fromfile(targets_path, dtype="<i8").reshape(b, s))
    H, A, G = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // A
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]

    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((s, s), float("-inf")).triu(1)

    x = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        y = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (y @ w[p + "self_attn.q_proj.weight"].T).view(b, s, A, D).transpose(1, 2)
        k = (y @ w[p + "self_attn.k_proj.weight"].T).view(b, s, G, D).transpose(1, 2)
        v = (y @ w[p + "self_attn.v_proj.weight"].T).view(b, s, G, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # repeat_kv: each key/value head serves A / G consecutive query heads
        k = k[:, :, None].expand(b, G, A // G, s, D).reshape(b, A, s, D)
        v = v[:, :, None].expand(b, G, A // G, s, D).reshape(b, A, s, D)
        att = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5 + mask, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, H)
        x = x + ctx @ w[p + "self_attn.o_proj.weight"].T
        y = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = y @ w[p + "mlp.gate_proj.weight"].T
        up = y @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    logits = x @ head.T
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             reduction="sum")
    logits.numpy().astype(np.float32).tofile(logits_out)
    open(loss_out, "w").write("%.9g\n" % loss.item())


if __name__ == "__main__":
    main()
