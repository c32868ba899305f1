"""train_pipelined.py's inputs, checked before any work as harp checks its own.

The flags, the export's manifest.json and schedule.csv, the token file and the
--init-from folder: a bad one ends the run with one line naming the file (or flag), the
field, the value, the rule and the fix, and harp's documented exit code (1: a bad input
file, 2: a bad command line), never a Python traceback or a run that trains on garbage.
The ranges are harp's (docs/file_formats.md, "Ranges" and "Limits").
"""

import argparse
import json
import math
import os
import re
import struct

PROG = "train_pipelined.py"
EXIT_INPUT, EXIT_USAGE = 1, 2
MAX_MANIFEST_BYTES = 64 << 20  # harp's limit on a JSON file
LLMC = {20240520: (1, 2), 20240801: (7, 4)}  # llm.c magic: (version, bytes per token)
LLMC_HEADER = 1024


class InputError(Exception):
    """One line for the user and the exit code that goes with it."""

    def __init__(self, message, code=EXIT_INPUT):
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line and exit 2 (not usage text)."""

    def error(self, message):
        raise InputError(message + "; see --help", EXIT_USAGE)


def _shown(value):
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _is_int(v, lo, hi):
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _is_num(v, lo, hi):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi


def check_args(args):
    """The flags' values (argparse has checked their types)."""
    def flag(name, value, ok, rule):
        if not ok:
            raise InputError("--%s %s: %s" % (name, value, rule), EXIT_USAGE)
    flag("steps", args.steps, 1 <= args.steps <= 10**9, "must be a whole number from 1 to 1e9")
    flag("seed", args.seed, 0 <= args.seed < 2**63, "must be a whole number from 0 to 2^63 - 1")
    flag("lr", args.lr, _is_num(args.lr, 0, 10) and args.lr > 0, "must be above 0 and at most 10")
    flag("min-lr", args.min_lr, _is_num(args.min_lr, 0, 10), "must be between 0 and 10")
    flag("warmup-steps", args.warmup_steps, 0 <= args.warmup_steps <= 10**9, "must be a whole number from 0 to 1e9")
    flag("decay-steps", args.decay_steps, 0 <= args.decay_steps <= 10**9, "must be a whole number from 0 to 1e9")
    flag("weight-decay", args.weight_decay, _is_num(args.weight_decay, 0, 10), "must be between 0 and 10")
    flag("grad-clip", args.grad_clip, _is_num(args.grad_clip, 0, 1e6), "must be between 0 (off) and 1e6")
    flag("device", args.device, args.device in ("cpu", "cuda"), "must be cpu or cuda")
    flag("threads", args.threads, 1 <= args.threads <= 4096, "must be a whole number from 1 to 4096")
    if not os.path.isdir(args.export):
        raise InputError("--export %s: no such folder; write one with harp export --plan PLAN --to "
                         "pytorch-pipelining -o %s" % (args.export, args.export), EXIT_USAGE)


class _Doc:
    """Messages about one file: FILE: PATH = VALUE: RULE; fix: FIX."""

    def __init__(self, file, fix):
        self.file, self.fix = file, fix

    def fail(self, path, value, rule):
        raise InputError("%s: %s = %s: %s; fix: %s" % (self.file, path, _shown(value), rule, self.fix))

    def get(self, obj, key, path):
        if not isinstance(obj, dict) or key not in obj:
            raise InputError("%s: %s is missing; fix: %s" % (self.file, path + key, self.fix))
        return obj[key]

    def int(self, obj, key, lo, hi, path=""):
        v = self.get(obj, key, path)
        if not _is_int(v, lo, hi):
            self.fail(path + key, v, "must be a whole number from %d to %d" % (lo, hi))
        return v

    def list(self, obj, key, path="", length=None):
        v = self.get(obj, key, path)
        if not isinstance(v, list) or (length is not None and len(v) != length):
            self.fail(path + key, v, "must be a list" + ("" if length is None else " of %d entries" % length))
        return v


def _unique_keys(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError("the key %r appears twice in one object; keep one" % k)
        seen.add(k)
    return dict(pairs)


def load_manifest(export_dir):
    """manifest.json, read and checked field by field against what the example uses."""
    file = os.path.join(export_dir, "manifest.json")
    again = "write the export again with harp export --plan PLAN --to pytorch-pipelining -o " + export_dir
    if not os.path.isfile(file):
        raise InputError("%s: missing (harp export writes it last: the export is incomplete or not one); %s"
                         % (file, again))
    if os.path.getsize(file) > MAX_MANIFEST_BYTES:
        raise InputError("%s: larger than 64 MiB, more than any export; %s" % (file, again))
    with open(file, "rb") as fh:
        raw = fh.read()
    try:
        m = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError:
        raise InputError("%s: is not UTF-8 text; the file is damaged: %s" % (file, again))
    except json.JSONDecodeError as e:
        raise InputError("%s: not valid JSON at line %d, column %d (%s)%s; %s" % (
            file, e.lineno, e.colno, e.msg, ": the file is empty" if not raw.strip() else "", again))
    except ValueError as e:
        raise InputError("%s: %s; %s" % (file, e, again))
    d = _Doc(file, again)
    if not isinstance(m, dict):
        d.fail("(the document)", m, "must be an object")
    if m.get("format") != "harp-pytorch-pipelining":
        d.fail("format", m.get("format"), "must be \"harp-pytorch-pipelining\" (a harp export --to pytorch-pipelining)")
    world = d.int(m, "world_size", 1, 1 << 20)
    S = d.int(m, "num_stages", 1, 4096)
    B = d.int(m, "microbatches", 1, 65536)
    b = d.int(m, "microbatch_size", 1, 65536)
    for key in ("predicted_s", "closed_form_s"):
        v = d.get(m, key, "")
        if not _is_num(v, 0, 1e6):
            d.fail(key, v, "must be a time between 0 and 1e6 s")
    for key in ("plan", "strategy", "schedule"):
        if not isinstance(d.get(m, key, ""), str):
            d.fail(key, m[key], "must be text")
    cfg = d.get(m, "model_config", "")
    if not isinstance(cfg, dict):
        d.fail("model_config", cfg, "must be an object")
    if cfg.get("family") not in ("gpt", "llama"):
        d.fail("model_config.family", cfg.get("family"), "must be gpt or llama")
    for key, hi in (("num_blocks", 1 << 10), ("hidden", 1 << 17), ("heads", 1 << 12), ("seq_len", 1 << 20),
                    ("vocab", 1 << 22), ("ffn_hidden", 1 << 20)):
        d.int(cfg, key, 1, hi, "model_config.")
    if not isinstance(d.get(cfg, "tied_embeddings", "model_config."), bool):
        d.fail("model_config.tied_embeddings", cfg["tied_embeddings"], "must be true or false")
    layers = d.list(m, "layers")
    if not layers:
        d.fail("layers", layers, "must list the model's layers")
    for i, layer in enumerate(layers):
        p = "layers[%d]." % i
        shape = d.list(layer, "output_shape", p)
        last = i == len(layers) - 1  # the model's head: its output is the logits, no cut
        if (not shape and not last) or not all(_is_int(x, 1, 1 << 24) for x in shape):
            d.fail(p + "output_shape", shape, "must be a list of positive whole numbers")
    stages = d.list(m, "stages", "", S)
    end = 0
    for s, st in enumerate(stages):
        p = "stages[%d]." % s
        span = d.list(st, "layers", p, 2)
        if not (_is_int(span[0], 0, len(layers)) and _is_int(span[1], 1, len(layers)) and span[0] < span[1]):
            d.fail(p + "layers", span, "must be [first, last) with 0 <= first < last <= %d (the model's layers)"
                   % len(layers))
        if span[0] != end:
            d.fail(p + "layers", span, "must start where the stage before ends (layer %d)" % end)
        end = span[1]
        d.int(st, "dp", 1, 1 << 20, p)
        d.int(st, "tp", 1, 1024, p)
    if end != len(layers):
        d.fail("stages[%d].layers" % (S - 1), stages[-1]["layers"], "must end at the model's last layer (%d)"
               % len(layers))
    ranks = d.list(m, "ranks", "", world)
    for r, me in enumerate(ranks):
        p = "ranks[%d]." % r
        if d.int(me, "rank", 0, world - 1, p) != r:
            d.fail(p + "rank", me["rank"], "must be %d (the entry's position)" % r)
        d.int(me, "stage", 0, S - 1, p)
        d.int(me, "dp_rank", 0, world - 1, p)
        samples = d.list(me, "samples", p, 2)
        if not (_is_int(samples[0], 0, b - 1) and _is_int(samples[1], 1, b) and samples[0] + samples[1] <= b):
            d.fail(p + "samples", samples, "must be [first, count] within the microbatch's %d samples" % b)
        slow = d.get(me, "emulated_slowdown", p)
        if not _is_num(slow, 1, 1000):
            d.fail(p + "emulated_slowdown", slow, "must be between 1 and 1000 x (harp's range)")
        for key in ("dp_group", "tp_group"):
            group = d.list(me, key, p)
            if not group or not all(_is_int(x, 0, world - 1) for x in group):
                d.fail(p + key, group, "must list ranks from 0 to %d" % (world - 1))
        for key in ("recv_fwd", "send_fwd", "recv_bwd", "send_bwd"):
            for k, x in enumerate(d.list(me, key, p)):
                q = "%s%s[%d]." % (p, key, k)
                d.int(x, "peer", 0, world - 1, q)
                d.int(x, "first", 0, b - 1, q)
                d.int(x, "count", 1, b, q)
    csv = d.get(m, "schedule_csv", "")
    if not isinstance(csv, str) or not csv or "/" in csv or csv in (".", ".."):
        d.fail("schedule_csv", csv, "must name a file in the export folder")
    return m


_ACTION = re.compile(r"^(\d+)(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B|REDUCE_GRAD|UNSHARD|RESHARD)(\d*)$")


def check_schedule(export_dir, manifest):
    """schedule.csv: one row per stage, each action of its own stage and a microbatch of the
    iteration, as PyTorch's compute_comms CSV spells them."""
    file = os.path.join(export_dir, manifest["schedule_csv"])
    again = "write the export again with harp export --plan PLAN --to pytorch-pipelining -o " + export_dir
    if not os.path.isfile(file):
        raise InputError("%s: missing; %s" % (file, again))
    with open(file, "rb") as fh:
        raw = fh.read(MAX_MANIFEST_BYTES + 1)
    try:
        rows = [line for line in raw.decode("utf-8").split("\n") if line.strip()]
    except UnicodeDecodeError:
        raise InputError("%s: is not UTF-8 text; the file is damaged: %s" % (file, again))
    S, B = manifest["num_stages"], manifest["microbatches"]
    if len(rows) != S:
        raise InputError("%s: %d rows, but the plan has %d stages (one row each); %s" % (file, len(rows), S, again))
    for s, row in enumerate(rows):
        for k, action in enumerate(row.split(",")):
            got = _ACTION.match(action.strip())
            where = "%s: row %d, action %d" % (file, s + 1, k + 1)
            if not got:
                raise InputError("%s: %s is not an action (such as %dF0, %dSEND_B3 or %dREDUCE_GRAD); %s"
                                 % (where, _shown(action[:40]), s, s, s, again))
            if int(got.group(1)) != s:
                raise InputError("%s: %s is stage %s's, in stage %d's row; %s" % (where, action, got.group(1), s, again))
            if got.group(3) and int(got.group(3)) >= B:
                raise InputError("%s: %s names microbatch %s of %d; %s" % (where, action, got.group(3), B, again))


def check_tokens(path, vocab):
    """A token file as harp reads it: llm.c's headed files (uint16 or uint32) or raw uint16,
    every id below the model's vocabulary; read in pieces (bounded memory)."""
    import numpy as np  # with torch, after the cheap checks
    fix = "write it with harp data prepare, or use --data synthetic"
    if not os.path.isfile(path):
        raise InputError("--data %s: no such file; %s" % (path, fix), EXIT_USAGE)
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(12)
    magic = struct.unpack("<I", head[:4])[0] if len(head) >= 4 else 0
    offset, width = 0, 2
    if magic in LLMC:
        version, width = LLMC[magic]
        if size < LLMC_HEADER:
            raise InputError("%s: an llm.c token file (magic %d) of %d bytes, shorter than its header; the file is "
                             "truncated; %s" % (path, magic, size, fix))
        got_version, count = struct.unpack("<II", head[4:12])
        if got_version != version:
            raise InputError("%s: an llm.c token file (magic %d) has version %d; this magic's version is %d; %s"
                             % (path, magic, got_version, version, fix))
        if count == 0 or count * width != size - LLMC_HEADER:
            raise InputError("%s: an llm.c token file says %d tokens but %d bytes follow its header; the file is "
                             "truncated or its header is wrong; %s" % (path, count, size - LLMC_HEADER, fix))
        offset = LLMC_HEADER
    elif size == 0 or size % 2:
        raise InputError("%s: %d bytes is %s, but tokens are 2-byte uint16 (and no llm.c header starts the file); "
                         "%s" % (path, size, "empty" if size == 0 else "an odd byte count", fix))
    tokens = np.memmap(path, dtype=np.uint16 if width == 2 else np.uint32, mode="r", offset=offset)
    step = 1 << 24
    for at in range(0, len(tokens), step):
        largest = int(tokens[at:at + step].max())
        if largest >= vocab:
            raise InputError("%s: token id %d at or past the model's vocabulary of %d (a damaged header, or a file "
                             "of another tokenizer); %s" % (path, largest, vocab, fix))
    return tokens


def check_init_from(folder):
    if not os.path.isfile(os.path.join(folder, "model.safetensors")) and \
            not os.path.isfile(os.path.join(folder, "model.safetensors.index.json")):
        raise InputError("--init-from %s: holds no model.safetensors (nor an index of shards); give a folder harp "
                         "export --format safetensors wrote" % folder, EXIT_USAGE)
