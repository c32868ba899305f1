#!/usr/bin/env python3
"""The PyTorch example refuses bad input as harp does (hardening, fourth round, class 3).

usage: example_inputs.py HARP SOURCE_DIR WORK_DIR

Before, 41 of 57 bad inputs to examples/pytorch/train_pipelined.py ended in a Python
traceback (a missing, empty, truncated or mistyped manifest.json, a corrupt schedule.csv,
bad flags), some ran to exit 0 (a stage's layers past the model, a negative microbatch
size, an llm.c token file with a corrupted magic, --grad-clip -1, --warmup-steps -5), and
an emulated slowdown of 1e6 hung past 75 s. Here each such input, by class, must end
before any work with one line naming the file or flag, harp's exit code (1: a bad input
file, 2: a bad command line) and no traceback: the manifest and CSV cases through
export_check.py in this process, and one case of each class through the script itself.
"""

import json
import os
import shutil
import subprocess
import sys
import time

HARP, SOURCE, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
EXAMPLE = os.path.join(SOURCE, "examples", "pytorch")
sys.path.insert(0, EXAMPLE)
import export_check  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail), flush=True)
    if not ok:
        failures.append(name)


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode != 0:
        sys.exit("setup failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
with open("one.yaml", "w") as f:
    f.write("version: 1\nname: one\nsubclusters:\n  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}\n")
with open("job.yaml", "w") as f:
    f.write("version: 1\ncluster: one.yaml\nmodel: {family: gpt, preset: gpt-tiny, granularity: 1}\n"
            "planner: {microbatches: 2, microbatch_size: 2}\n")
run([HARP, "plan", "--job", "job.yaml", "--output", "p.json"])
run([HARP, "export", "--plan", "p.json", "--to", "pytorch-pipelining", "-o", "good"])
with open("corpus.txt", "w") as f:
    f.write("the pipeline sends its activations over the slow link.\n" * 200)
run([HARP, "data", "prepare", "--input", "corpus.txt", "--output", "llmc.bin", "--format", "llmc"])
good = json.load(open("good/manifest.json"))
csv = open("good/schedule.csv").read()


def export_with(name, manifest=None, manifest_text=None, schedule=None):
    """A copy of the good export with one thing changed."""
    shutil.rmtree(name, ignore_errors=True)
    shutil.copytree("good", name)
    if manifest_text is not None:
        open(name + "/manifest.json", "w").write(manifest_text)
    elif manifest is not None:
        json.dump(manifest, open(name + "/manifest.json", "w"))
    if schedule is not None:
        open(name + "/schedule.csv", "w").write(schedule)
    return name


def changed(path, value):
    m = json.loads(json.dumps(good))
    at = m
    for key in path[:-1]:
        at = at[key]
    if value is KeyError:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return m


# 1. The manifest and the schedule CSV, in this process.
manifest_cases = {
    "missing": (None, None, "missing (harp export writes it last"),
    "empty": (None, "", "the file is empty"),
    "truncated": (None, json.dumps(good)[:200], "not valid JSON at line 1"),
    "not an object": (None, "[1, 2]", "must be an object"),
    "a key twice": (None, json.dumps(good)[:-1] + ', "microbatches": 3}', "appears twice"),
    "not an export": (changed(["format"], "other"), None, "format = 'other'"),
    "layers past the model": (changed(["stages", 0, "layers"], [0, 99]), None, "stages[0].layers = [0, 99]"),
    "a negative microbatch size": (changed(["microbatch_size"], -2), None, "microbatch_size = -2"),
    "a stage count that wraps": (changed(["num_stages"], 4294967297), None, "num_stages = 4294967297"),
    "a slowdown of 1e6": (changed(["ranks", 0, "emulated_slowdown"], 1e6), None, "between 1 and 1000"),
    "a missing field": (changed(["model_config", "vocab"], KeyError), None, "model_config.vocab is missing"),
    "a field of the wrong kind": (changed(["ranks", 0, "samples"], "all"), None, "ranks[0].samples = 'all'"),
    "a boolean for a number": (changed(["world_size"], True), None, "world_size = true"),
}
for name, (manifest, text, want) in manifest_cases.items():
    d = export_with("m_" + name.replace(" ", "_"), manifest, text)
    if name == "missing":
        os.remove(d + "/manifest.json")
    try:
        export_check.load_manifest(d)
        check("manifest: " + name, False, "accepted")
    except export_check.InputError as e:
        msg = str(e)
        check("manifest: " + name, e.code == 1 and want in msg and "manifest.json" in msg and "\n" not in msg, msg)

rows = csv.strip().split("\n")
schedule_cases = {
    "not an action": (csv.replace("0F1", "0FX1", 1), "is not an action"),
    "another stage's action": (csv.replace("0F1", "1F1", 1), "is stage 1's, in stage 0's row"),
    "a microbatch past the iteration": (csv.replace("0F1", "0F7", 1), "names microbatch 7 of 2"),
    "a row too many": (csv + rows[0] + "\n", "2 rows, but the plan has 1 stages"),
    "binary": ("\xff\xfe" + csv, None),
}
for name, (text, want) in schedule_cases.items():
    d = export_with("s_" + name.replace(" ", "_").replace("'", ""), schedule=text)
    if name == "binary":
        open(d + "/schedule.csv", "wb").write(b"\xff\xfe" + csv.encode())
    try:
        export_check.check_schedule(d, export_check.load_manifest(d))
        check("schedule: " + name, False, "accepted")
    except export_check.InputError as e:
        msg = str(e)
        check("schedule: " + name, e.code == 1 and (want is None or want in msg) and "schedule.csv" in msg, msg)

# 2. Through the script: one case of each class, and the slowdown that hung.
bad_magic = open("llmc.bin", "rb").read()
open("bad_magic.bin", "wb").write(b"\x21" + bad_magic[1:])
open("odd.bin", "wb").write(b"\x01\x02\x03")
env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
python = sys.executable
script_cases = [
    ("a missing manifest", ["--export", "m_missing"], 1, "manifest.json: missing"),
    ("a truncated manifest", ["--export", "m_truncated"], 1, "not valid JSON"),
    ("layers past the model", ["--export", "m_layers_past_the_model"], 1, "stages[0].layers"),
    ("a slowdown of 1e6", ["--export", "m_a_slowdown_of_1e6", "--emulate"], 1, "between 1 and 1000"),
    ("a corrupt schedule", ["--export", "s_not_an_action"], 1, "is not an action"),
    ("an llm.c file with a corrupted magic", ["--export", "good", "--data", "bad_magic.bin"], 1,
     "at or past the model's vocabulary"),
    ("a token file of an odd size", ["--export", "good", "--data", "odd.bin"], 1, "an odd byte count"),
    ("a missing token file", ["--export", "good", "--data", "none.bin"], 2, "--data none.bin: no such file"),
    ("--grad-clip -1", ["--export", "good", "--grad-clip", "-1"], 2, "--grad-clip -1.0: must be between 0"),
    ("--warmup-steps -5", ["--export", "good", "--warmup-steps", "-5"], 2, "--warmup-steps -5"),
    ("--steps 0", ["--export", "good", "--steps", "0"], 2, "--steps 0"),
    ("--lr nan", ["--export", "good", "--lr", "nan"], 2, "--lr nan"),
    ("--steps abc", ["--export", "good", "--steps", "abc"], 2, "invalid int value"),
    ("an unknown flag", ["--export", "good", "--stepz", "3"], 2, "unrecognized arguments"),
    ("no --export", [], 2, "--export"),
    ("a missing export folder", ["--export", "nowhere"], 2, "--export nowhere: no such folder"),
    ("--init-from without weights", ["--export", "good", "--init-from", "good"], 2, "holds no model.safetensors"),
    ("--device tpu", ["--export", "good", "--device", "tpu"], 2, "must be cpu or cuda"),
]
for name, args, code, want in script_cases:
    start = time.time()
    try:
        r = subprocess.run([python, os.path.join(EXAMPLE, "train_pipelined.py")] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        check("script: " + name, False, "still running after 60 s")
        continue
    err = r.stderr
    ok = r.returncode == code and want in err and err.count("\n") == 1 and "Traceback" not in err and \
        err.startswith("train_pipelined.py: ")
    check("script: %s (%.1f s)" % (name, time.time() - start), ok, "exit %d, stderr %r" % (r.returncode, err[-600:]))

total = len(manifest_cases) + len(schedule_cases) + len(script_cases)
print("%d of %d bad inputs refused with one line and harp's exit code" % (total - len(failures), total))
sys.exit(1 if failures else 0)
