"""The reference side of tests/runtime/transformers_test.cc: Hugging Face transformers
itself (the pinned version in the project's .venv), on tiny random configs of each family
harp reads, nothing downloaded.

  transformers_reference.py make FAMILY DIR
      builds FAMILY's model from a tiny config (weights drawn from seed 0, norms and biases
      moved off their 1s and 0s so that a part left out shows), saves it with
      save_pretrained into DIR/hf, and writes DIR/reference.safetensors: the input ids
      [2, 17] (inputs are the first 16, targets the last 16), its logits, the loss (the
      sum of the targets' cross-entropies) and every parameter's gradient of that loss
      under "grad.<Hugging Face name>"; and DIR/generated.json: the greedy continuation
      (12 tokens) of a 5-token prompt.
  transformers_reference.py check EXPORT DIR
      loads the folder harp exported (EXPORT) with from_pretrained and prints the largest
      difference of its logits from DIR's reference, relative to their largest magnitude.
  transformers_reference.py count FOLDER
      prints num_parameters() of the model FOLDER's config.json describes, built on the
      meta device (no memory, nothing downloaded).

FAMILY: gpt2, llama, llama31 (rope scaling llama3), qwen2 (q/k/v biases, tied), qwen3
(q/k norm, head_dim 24 where hidden / heads is 16) or mistral (sliding window 6, shorter
than the 16 positions).
"""
import json
import os
import sys

import torch
import transformers

SEQ = 16


def config(family):
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-6, tie_word_embeddings=False)
    if family == "gpt2":
        return transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=48, n_inner=96,
                                       activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    if family == "llama":
        return transformers.LlamaConfig(**common, rope_theta=10000.0)
    if family == "llama31":
        return transformers.LlamaConfig(**common, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    if family == "qwen2":
        return transformers.Qwen2Config(**dict(common, tie_word_embeddings=True), rope_theta=1e6)
    if family == "qwen3":
        return transformers.Qwen3Config(**common, head_dim=24, rope_theta=1e6)
    if family == "mistral":
        return transformers.MistralConfig(**common, sliding_window=6, rope_theta=1e4)
    sys.exit("unknown family " + family)


def make(family, out):
    torch.manual_seed(0)
    cfg = config(family)
    cfg._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or "ln_f" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p) if name.endswith("weight") else 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:  # large enough that positions and every part change the greedy tokens
                p.copy_(0.25 * torch.randn_like(p))
    model.save_pretrained(os.path.join(out, "hf"), safe_serialization=True)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (2, SEQ + 1), generator=gen)
    logits = model(input_ids=ids[:, :SEQ]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1),
                                             reduction="sum")
    loss.backward()
    tensors = {"input_ids": ids, "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().contiguous()
    from safetensors.torch import save_file
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    prompt = ids[:1, :5]
    with torch.no_grad():
        generated = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    json.dump({"prompt": prompt[0].tolist(), "generated": generated[0, 5:].tolist()},
              open(os.path.join(out, "generated.json"), "w"))


def check(export, out):
    from safetensors.torch import load_file
    ref = load_file(os.path.join(out, "reference.safetensors"))
    model = transformers.AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"][:, :SEQ]).logits
    print("%.3e" % ((logits - ref["logits"]).abs().max() / ref["logits"].abs().max()).item())


def count(folder):
    cfg = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    print(model.num_parameters())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "count":
        count(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
