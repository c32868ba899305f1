"""An independent greedy decode in PyTorch of a Hugging Face GPT-2 or LLaMA folder, for the
check of `harp generate` (generate_test.cc): GPT2LMHeadModel's and LlamaForCausalLM's
forward written out here (config.json and model.safetensors read with json, struct and
numpy), in float64, over the whole context at every token, the context cropped to the
model's positions as nanoGPT's sample.py crops it.

usage: generate_reference.py MODEL_DIR PROMPT_IDS(comma separated) NEW_TOKENS
prints the new token ids, comma separated.
"""
import json
import math
import sys

import numpy as np
import torch

from llama_reference import read_safetensors  # the same folder: on sys.path as the script's


def causal(s):
    return torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)


def gpt2_logits(cfg, w, ids):
    s, H, A = len(ids), cfg["n_embd"], cfg["n_head"]
    D = H // A
    eps = cfg["layer_norm_epsilon"]
    t = torch.tensor(ids)
    x = w["transformer.wte.weight"][t] + w["transformer.wpe.weight"][:s]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (H,), w[p + ".weight"], w[p + ".bias"], eps)

    def conv1d(x, p):  # Conv1D: weight [in, out]
        return x @ w[p + ".weight"] + w[p + ".bias"]

    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        qkv = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (qkv[:, j * H:(j + 1) * H].view(s, A, D).transpose(0, 1) for j in range(3))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + causal(s), dim=-1)
        x = x + conv1d((att @ v).transpose(0, 1).reshape(s, H), p + "attn.c_proj")
        a = conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")
        a = 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a ** 3)))  # gelu_new
        x = x + conv1d(a, p + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    head = w.get("lm_head.weight", w["transformer.wte.weight"])
    return x[-1] @ head.T


def llama_logits(cfg, w, ids):
    s, H, A = len(ids), cfg["hidden_size"], cfg["num_attention_heads"]
    G, D = cfg["num_key_value_heads"], H // A
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    emb = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq)
    emb = torch.cat((emb, emb), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rms(x, p):
        return w[p] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rot(x):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        y = rms(x, p + "input_layernorm.weight")
        q = rot((y @ w[p + "self_attn.q_proj.weight"].T).view(s, A, D).transpose(0, 1))
        k = rot((y @ w[p + "self_attn.k_proj.weight"].T).view(s, G, D).transpose(0, 1))
        v = (y @ w[p + "self_attn.v_proj.weight"].T).view(s, G, D).transpose(0, 1)
        k = k.repeat_interleave(A // G, dim=0)  # repeat_kv
        v = v.repeat_interleave(A // G, dim=0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + causal(s), dim=-1)
        x = x + (att @ v).transpose(0, 1).reshape(s, H) @ w[p + "self_attn.o_proj.weight"].T
        y = rms(x, p + "post_attention_layernorm.weight")
        gate = y @ w[p + "mlp.gate_proj.weight"].T
        up = y @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, "model.norm.weight")
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x[-1] @ head.T


def main():
    folder, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = json.load(open(folder + "/config.json"))
    w = read_safetensors(folder + "/model.safetensors", np.float64)
    gpt2 = cfg["model_type"] == "gpt2"
    window = cfg["n_positions"] if gpt2 else cfg["max_position_embeddings"]
    ids = [int(t) for t in prompt.split(",")]
    new = []
    with torch.no_grad():
        for _ in range(n):
            context = ids[-window:]
            logits = gpt2_logits(cfg, w, context) if gpt2 else llama_logits(cfg, w, context)
            ids.append(int(torch.argmax(logits)))
            new.append(ids[-1])
    print(",".join(str(t) for t in new))


if __name__ == "__main__":
    main()
