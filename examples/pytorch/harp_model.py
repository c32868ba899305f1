"""The pieces a PyTorch pipeline needs to run a HARP plan: the model's layer sequence as
plain torch.nn code, Hugging Face weights, HARP's token files and its batch sampling.

The layer sequence is HARP's (docs/pytorch.md): layer 0 the embeddings, then k sub-layers
per block, then the tail (final norm, LM head). A block is four pieces, and a layer holds
one or more of them in order:

    attn_in   pre-norm, q, k, v projections   -> cat(q, k, v, residual)
    attn_out  attention, output projection    -> hidden state (residual added)
    mlp_in    pre-norm, fc1 + GELU (GPT) or
              silu(gate) * up (LLaMA)         -> cat(activation, residual)
    mlp_out   second projection               -> hidden state (residual added)

so a plan may cut between any two pieces and the tensor crossing the cut is the one the
plan's cut_shape gives. GPT: pre-LayerNorm blocks with biases, learned positions, GELU
(tanh), tied LM head. LLaMA: RMSNorm, rotary positions (Hugging Face's rotate_half),
grouped-query attention, SwiGLU, no biases; and the parts of its lineage the model config
names (docs/file_formats.md, "Model"): q/k/v biases (Qwen2), a q/k norm per head and a
head_dim (Qwen3), a sliding window (Mistral), rope scaling llama3 (LLaMA 3.1), the norms'
epsilon. Neither has dropout.
"""

import json
import math
import os
import struct

import torch
import torch.nn.functional as F

PIECES = ("attn_in", "attn_out", "mlp_in", "mlp_out")
NORM_EPS = 1e-5

# ---------------------------------------------------------------------------------------
# Parameters: HARP's global names ("block3.attn.qkv.weight") and shapes, per layer.


def layer_params(cfg, layer):
    """[(name, shape)] of one layer of the sequence (a manifest "layers" entry)."""
    h, V, s = cfg["hidden"], cfg["vocab"], cfg["seq_len"]
    f = cfg["ffn_hidden"]
    llama = cfg["family"] == "llama"
    if layer["kind"] == "embed":
        out = [("embed.token.weight", (V, h))]
        return out if llama else out + [("embed.position.weight", (s, h))]
    if layer["kind"] == "tail":
        if llama:
            return [("head.norm.weight", (h,)), ("head.lm.weight", (V, h))]
        return [("head.ln_f.weight", (h,)), ("head.ln_f.bias", (h,)), ("head.lm.weight", (V, h))]
    p = "block%d." % layer["block"]
    kv = cfg.get("kv_heads") or cfg["heads"]
    d = head_size(cfg)
    qw, kvw = cfg["heads"] * d, kv * d
    bias = [("attn.q.bias", (qw,)), ("attn.k.bias", (kvw,)), ("attn.v.bias", (kvw,))] if cfg.get("qkv_bias") else []
    qk_norm = [("attn.q_norm.weight", (d,)), ("attn.k_norm.weight", (d,))] if cfg.get("qk_norm") else []
    out = []
    for piece in layer["pieces"]:
        if llama:
            out += {
                "attn_in": [("ln1.weight", (h,)), ("attn.q.weight", (qw, h)), ("attn.k.weight", (kvw, h)),
                            ("attn.v.weight", (kvw, h))] + bias,
                "attn_out": [("attn.proj.weight", (h, qw))] + qk_norm,
                "mlp_in": [("ln2.weight", (h,)), ("mlp.gate.weight", (f, h)), ("mlp.up.weight", (f, h))],
                "mlp_out": [("mlp.down.weight", (h, f))],
            }[piece]
        else:
            out += {
                "attn_in": [("ln1.weight", (h,)), ("ln1.bias", (h,)), ("attn.qkv.weight", (3 * h, h)),
                            ("attn.qkv.bias", (3 * h,))],
                "attn_out": [("attn.proj.weight", (h, h)), ("attn.proj.bias", (h,))],
                "mlp_in": [("ln2.weight", (h,)), ("ln2.bias", (h,)), ("mlp.fc1.weight", (f, h)),
                           ("mlp.fc1.bias", (f,))],
                "mlp_out": [("mlp.fc2.weight", (h, f)), ("mlp.fc2.bias", (h,))],
            }[piece]
    return [(n if n.startswith("embed") or n.startswith("head") else p + n, shape) for n, shape in out]


# ---------------------------------------------------------------------------------------
# The stage: a run of layers [first, last) as one module.


def head_size(cfg):
    """hidden / heads, unless the config gives head_dim."""
    return cfg.get("head_dim") or cfg["hidden"] // cfg["heads"]


def _inv_freq(cfg, d):
    """The rotary inverse frequencies, scaled as rope_type llama3 does (LLaMA 3.1)."""
    inv = cfg.get("rope_theta", 10000.0) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    r = cfg.get("rope_scaling")
    if not r:
        return inv
    old, low, high, factor = (r["original_max_position_embeddings"], r["low_freq_factor"], r["high_freq_factor"],
                              r["factor"])
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def _rotary(x, cfg):
    """Hugging Face's rotary embedding for x of [b, heads, s, d] at positions 0..s-1."""
    s, d = x.shape[2], x.shape[3]
    angles = torch.outer(torch.arange(s, dtype=torch.float64), _inv_freq(cfg, d))
    angles = torch.cat([angles, angles], -1)
    cos, sin = angles.cos().to(x.dtype).to(x.device), angles.sin().to(x.dtype).to(x.device)
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


class StageModule(torch.nn.Module):
    """Layers [first, last) of the sequence. forward(x): token ids [b, s] on the first
    stage, else the cut tensor the previous stage sent; returns the next cut tensor, or the
    logits [b, s, V] on the last stage (the loss function takes them)."""

    def __init__(self, cfg, layers, dtype=torch.float32):
        super().__init__()
        self.cfg, self.layers = cfg, layers
        self.llama = cfg["family"] == "llama"
        self.names = [n for layer in layers for n, _ in layer_params(cfg, layer)]
        self.params = torch.nn.ParameterDict()
        for layer in layers:
            for name, shape in layer_params(cfg, layer):
                self.params[self._key(name)] = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))

    @staticmethod
    def _key(name):
        return name.replace(".", "/")

    def w(self, name):
        return self.params[self._key(name)]

    def named_harp_parameters(self):
        """(HARP name, parameter) in layer order."""
        return [(n, self.w(n)) for n in self.names]

    def _rms(self, x, weight):
        y = x.float() if x.dtype != torch.float64 else x
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.cfg.get("norm_eps", NORM_EPS))
        return weight * y.to(x.dtype)

    def _norm(self, x, prefix):
        if self.llama:
            return self._rms(x, self.w(prefix + ".weight"))
        return F.layer_norm(x, (x.shape[-1],), self.w(prefix + ".weight"), self.w(prefix + ".bias"),
                            self.cfg.get("norm_eps", NORM_EPS))

    def _attention(self, q, k, v):
        s = q.shape[2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        i = torch.arange(s, device=q.device)
        mask = i.unsqueeze(0) > i.unsqueeze(1)  # a future position
        window = self.cfg.get("sliding_window") or 0
        if window:  # Mistral: the last `window` positions only, its own included
            mask = mask | (i.unsqueeze(0) <= i.unsqueeze(1) - window)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v

    def _piece(self, p, piece, t, normed):
        cfg, h = self.cfg, self.cfg["hidden"]
        a = cfg["heads"]
        d = h // a
        if piece == "attn_in":
            if self.llama:
                def bias(name):
                    return self.w(p + "attn.%s.bias" % name) if cfg.get("qkv_bias") else None
                return torch.cat([F.linear(normed, self.w(p + "attn.q.weight"), bias("q")),
                                  F.linear(normed, self.w(p + "attn.k.weight"), bias("k")),
                                  F.linear(normed, self.w(p + "attn.v.weight"), bias("v"))], -1)
            return F.linear(normed, self.w(p + "attn.qkv.weight"), self.w(p + "attn.qkv.bias"))
        if piece == "attn_out":
            b, s = t.shape[0], t.shape[1]
            g = (cfg.get("kv_heads") or a) if self.llama else a
            if self.llama:
                d = head_size(cfg)
            qw, kv = a * d, g * d

            def heads(offset, n):
                return t[..., offset:offset + n * d].reshape(b, s, n, d).transpose(1, 2)

            q, k, v = heads(0, a), heads(qw, g), heads(qw + kv, g)
            if self.llama:
                if cfg.get("qk_norm"):  # Qwen3: RMSNorm of each head, before rotary
                    q, k = self._rms(q, self.w(p + "attn.q_norm.weight")), self._rms(k, self.w(p + "attn.k_norm.weight"))
                q, k = _rotary(q, cfg), _rotary(k, cfg)
                if g != a:
                    k, v = k.repeat_interleave(a // g, 1), v.repeat_interleave(a // g, 1)
            context = self._attention(q, k, v).transpose(1, 2).reshape(b, s, qw)
            bias = None if self.llama else self.w(p + "attn.proj.bias")
            return F.linear(context, self.w(p + "attn.proj.weight"), bias)
        if piece == "mlp_in":
            if self.llama:
                return F.silu(F.linear(normed, self.w(p + "mlp.gate.weight"))) * F.linear(
                    normed, self.w(p + "mlp.up.weight"))
            return F.gelu(F.linear(normed, self.w(p + "mlp.fc1.weight"), self.w(p + "mlp.fc1.bias")),
                          approximate="tanh")
        if self.llama:
            return F.linear(t, self.w(p + "mlp.down.weight"))
        return F.linear(t, self.w(p + "mlp.fc2.weight"), self.w(p + "mlp.fc2.bias"))

    def _layer(self, layer, x):
        h = self.cfg["hidden"]
        if layer["kind"] == "embed":
            e = F.embedding(x, self.w("embed.token.weight"))
            return e if self.llama else e + self.w("embed.position.weight")[: x.shape[1]]
        if layer["kind"] == "tail":
            y = self._norm(x, "head.norm" if self.llama else "head.ln_f")
            return F.linear(y, self.w("head.lm.weight"))
        p = "block%d." % layer["block"]
        t, res = x, None
        if layer["pieces"][0] in ("attn_out", "mlp_out"):  # a cut tensor: the piece's input and the residual
            t, res = x[..., :-h], x[..., -h:]
        for piece in layer["pieces"]:
            normed = None
            if piece in ("attn_in", "mlp_in"):
                normed = self._norm(t, p + ("ln1" if piece == "attn_in" else "ln2"))
                res = t
            t = self._piece(p, piece, t, normed)
            if piece in ("attn_out", "mlp_out"):
                t, res = res + t, None
        return t if res is None else torch.cat([t, res], -1)

    def forward(self, x):
        for layer in self.layers:
            x = self._layer(layer, x)
        return x


# ---------------------------------------------------------------------------------------
# Hugging Face weights (safetensors; GPT2LMHeadModel's or LlamaForCausalLM's names).

_GPT2_FIXED = {"embed.token.weight": ("transformer.wte.weight", False),
               "embed.position.weight": ("transformer.wpe.weight", False),
               "head.ln_f.weight": ("transformer.ln_f.weight", False),
               "head.ln_f.bias": ("transformer.ln_f.bias", False)}
_GPT2_BLOCK = {"ln1": "ln_1", "ln2": "ln_2", "attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj",
               "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj"}
_LLAMA_FIXED = {"embed.token.weight": "model.embed_tokens.weight", "head.norm.weight": "model.norm.weight"}
_LLAMA_BLOCK = {"ln1": "input_layernorm", "ln2": "post_attention_layernorm", "attn.q": "self_attn.q_proj",
                "attn.k": "self_attn.k_proj", "attn.v": "self_attn.v_proj", "attn.proj": "self_attn.o_proj",
                "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
                "mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj"}


def hf_name(cfg, name):
    """(Hugging Face name, stored transposed) of a HARP parameter name."""
    tied = cfg["tied_embeddings"]
    llama = cfg["family"] == "llama"
    if name == "head.lm.weight":
        if tied:
            return ("model.embed_tokens.weight" if llama else "transformer.wte.weight"), False
        return "lm_head.weight", False
    if llama and name in _LLAMA_FIXED:
        return _LLAMA_FIXED[name], False
    if not llama and name in _GPT2_FIXED:
        return _GPT2_FIXED[name]
    block, rest = name.split(".", 1)
    n = int(block[len("block"):])
    stem, leaf = rest.rsplit(".", 1)
    if llama:
        return "model.layers.%d.%s.%s" % (n, _LLAMA_BLOCK[stem], leaf), False
    # GPT-2's Conv1D weights are stored [in, out].
    return "transformer.h.%d.%s.%s" % (n, _GPT2_BLOCK[stem], leaf), leaf == "weight" and stem not in ("ln1", "ln2")


_DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "F16": (torch.float16, 2),
           "BF16": (torch.bfloat16, 2)}


def _safetensors_headers(folder):
    """{tensor name: (file, header entry, data offset)} of model.safetensors or its shards."""
    index = os.path.join(folder, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    out = {}
    for name in files:
        path = os.path.join(folder, name)
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for key, entry in header.items():
            if key != "__metadata__":
                out[key] = (path, entry, 8 + n)
    return out


def load_hf_weights(module, cfg, folder):
    """Copies the stage's parameters from a Hugging Face folder; names what is missing."""
    headers = _safetensors_headers(folder)
    with torch.no_grad():
        for name, param in module.named_harp_parameters():
            key, transposed = hf_name(cfg, name)
            if key not in headers:
                raise SystemExit("%s: no tensor %s (for %s)" % (folder, key, name))
            path, entry, base = headers[key]
            dtype, size = _DTYPES[entry["dtype"]]
            begin, end = entry["data_offsets"]
            with open(path, "rb") as fh:
                fh.seek(base + begin)
                raw = bytearray(fh.read(end - begin))
            t = torch.frombuffer(raw, dtype=dtype).reshape(entry["shape"]) if raw else torch.empty(0, dtype=dtype)
            if transposed:
                t = t.t()
            if name == "embed.position.weight":
                t = t[: param.shape[0]]
            if tuple(t.shape) != tuple(param.shape):
                raise SystemExit("%s: %s has shape %s, the model needs %s" % (folder, key, list(t.shape),
                                                                               list(param.shape)))
            param.copy_(t.to(param.dtype))


# ---------------------------------------------------------------------------------------
# Token files and HARP's sampling: global sample j of step t starts at a hash of
# (seed, t, j), so every layout reads the same batch (runtime/exec/data.h).

_MASK = (1 << 64) - 1


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def synthetic_tokens(seed, count, vocab):
    """HARP's `--data synthetic`: `count` seeded pseudo-random ids below `vocab`."""
    import numpy as np
    out = np.empty(count, dtype=np.uint16)
    state = _splitmix64(seed & _MASK)
    for i in range(count):
        state = _splitmix64(state)
        out[i] = state % vocab
    return out


def open_tokens(path):
    """A token file (raw uint16, llm.c uint16 or uint32) as a 1-D int64 tensor, memory-mapped."""
    import numpy as np
    with open(path, "rb") as fh:
        head = fh.read(8)
    magic, version = struct.unpack("<ii", head) if len(head) == 8 else (0, 0)
    if (magic, version) == (20240520, 1):
        return np.memmap(path, dtype=np.uint16, mode="r", offset=1024)
    if (magic, version) == (20240801, 7):
        return np.memmap(path, dtype=np.uint32, mode="r", offset=1024)
    return np.memmap(path, dtype=np.uint16, mode="r")


def sample_tokens(tokens, seed, step, first, count, seq_len):
    """Samples [first, first + count) of step `step`: int64 [count, seq_len + 1]."""
    import numpy as np
    span = len(tokens) - seq_len - 1
    out = np.empty((count, seq_len + 1), dtype=np.int64)
    base = _splitmix64(_splitmix64(seed & _MASK) ^ step)
    for i in range(count):
        offset = _splitmix64(base ^ (first + i)) % span
        out[i] = tokens[offset:offset + seq_len + 1]
    return torch.from_numpy(out)


def lr_at(step, lr, min_lr, warmup_steps, decay_steps):
    """HARP's schedule: linear warm-up from lr / warmup, then cosine to min_lr at decay_steps."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= decay_steps:
        return min_lr
    ratio = (step - warmup_steps) / (decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)
