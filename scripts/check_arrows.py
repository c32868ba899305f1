#!/usr/bin/env python3
"""The layering check (make test runs it): every #include of a HARP header must follow an
arrow of the room table in docs/architecture.md, no HARP_* variable name is spelled
outside src/launch/worker_env.cc (the launcher-worker contract, launch/worker_env.h), and
no file of the runtime but runtime/exec/compute_stream.cc synchronises the device or a
stream (a device-wide synchronisation inside a step waits for NCCL's posted receives:
the deadlock of tests/runtime_dist/nccl_semantics_test.cc; the one seam counts and bounds
every host synchronisation, runtime/exec/compute_stream.h).

The table is the first ``` block of docs/architecture.md: an entry starts at column 0
with its room name(s) ("data, launch" names two) and ends with what it may include,
after the last "->" of its last line; a room may include itself and, transitively, what its
dependencies may. A room is a folder of src/ and include/harp/ (runtime/nn and the
other runtime rooms count as rooms of their own; files directly under runtime/ are the
room "runtime").

  check_arrows.py [ROOT]            check the tree at ROOT (default: this script's ..)
  check_arrows.py --self-test       copy the tree, plant a forbidden include, a HARP_*
                                    literal and a device synchronisation, and require all
                                    three to be caught
Exit 0 when clean, 1 with one line per broken rule.
"""
import os
import re
import shutil
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"harp/([a-z_/]+)/[a-z_0-9]+\.h"')
HARP_VAR = re.compile(r'"HARP_[A-Z0-9_]+"')
RUNTIME_ROOMS = ("nn", "comm", "exec", "io")
# A synchronisation of the device or of a stream, in libtorch's or CUDA's spelling.
DEVICE_SYNC = re.compile(r"torch::cuda::synchronize|cuda(Device|Stream)Synchronize|synchronize(Device|Stream)\b|"
                         r"(\.|->)synchronize\(\)")
SYNC_HOME = "runtime/exec/compute_stream.cc"


def read_table(root):
    text = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    block = text.split("```", 2)[1]
    entries = []  # (names, lines)
    for line in block.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            entries.append(([n.strip() for n in names.split(",")], []))
        if entries:
            entries[-1][1].append(line)
    rooms = {}
    for names, lines in entries:
        deps = set()
        last = lines[-1]  # what a room may include ends its entry: "-> a, b + libtorch"
        if "->" in last:
            for d in last.rsplit("->", 1)[1].split("+")[0].split(","):
                if d.strip():
                    deps.add(d.strip())
        for n in names:
            rooms.setdefault(n, set()).update(deps)
    return rooms


def closure(rooms):
    allowed = {}

    def visit(r, seen):
        if r in allowed:
            return allowed[r]
        if r in seen:
            raise SystemExit(f"docs/architecture.md: the rooms' arrows form a cycle through {r}")
        out = {r}
        for d in rooms.get(r, ()):
            out |= visit(d, seen | {r})
        allowed[r] = out
        return out

    for r in rooms:
        visit(r, set())
    return allowed


def room_of(rel):
    """The room of a path relative to src/ or include/harp/, or None."""
    parts = rel.split("/")
    if len(parts) < 2:
        return None
    if parts[0] == "runtime":
        return "runtime/" + parts[1] if len(parts) > 2 and parts[1] in RUNTIME_ROOMS else "runtime"
    return parts[0]


def included_room(path):
    parts = path.split("/")
    if parts[0] == "runtime":
        return "runtime/" + parts[1] if len(parts) > 1 and parts[1] in RUNTIME_ROOMS else "runtime"
    return parts[0]


def check(root):
    rooms = read_table(root)
    allowed = closure(rooms)
    broken = []
    for base in ("src", os.path.join("include", "harp")):
        top = os.path.join(root, base)
        for dirpath, _, files in os.walk(top):
            for f in sorted(files):
                if not f.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, top).replace(os.sep, "/")
                shown = os.path.relpath(path, root)
                room = room_of(rel)
                lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
                for n, line in enumerate(lines, 1):
                    code = line.split("//", 1)[0]
                    if rel.startswith("runtime/") and rel != SYNC_HOME and DEVICE_SYNC.search(code):
                        broken.append(f"{shown}:{n}: synchronises the device or a stream "
                                      f"({DEVICE_SYNC.search(code).group(0)}); only {SYNC_HOME} does (ComputeStream:"
                                      " counted, after Transport::finish_step, never device-wide in a step)")
                    if HARP_VAR.search(line) and rel != "launch/worker_env.cc":
                        broken.append(f"{shown}:{n}: spells {HARP_VAR.search(line).group(0)}; "
                                      "HARP_* variables live in launch/worker_env.cc (use launch::WorkerEnv)")
                    m = INCLUDE.match(line)
                    if not m or room is None:
                        continue
                    target = included_room(m.group(1))
                    if room not in allowed:
                        broken.append(f"{shown}:{n}: room {room} is not in docs/architecture.md's table; add it")
                        continue
                    if target not in allowed[room]:
                        ok = ", ".join(sorted(allowed[room] - {room})) or "nothing"
                        broken.append(f"{shown}:{n}: room {room} includes harp/{m.group(1)}/ (room {target}), "
                                      f"against the arrows of docs/architecture.md; {room} may include {ok}")
    return broken


def self_test(root):
    with tempfile.TemporaryDirectory() as tmp:
        for part in ("src", "include", "docs"):
            shutil.copytree(os.path.join(root, part), os.path.join(tmp, part))
        clean = check(tmp)
        if clean:
            print("self-test: the copied tree is not clean to begin with:\n" + "\n".join(clean))
            return 1
        with open(os.path.join(tmp, "src", "common", "status.cc"), "a") as f:
            f.write('#include "harp/planner/plan_job.h"\n')
        with open(os.path.join(tmp, "src", "runtime", "nn", "gpt.cc"), "a") as f:
            f.write('#include "harp/runtime/io/metrics.h"\n')
        with open(os.path.join(tmp, "src", "cli", "cli.cc"), "a") as f:
            f.write('// const char* v = getenv("HARP_EMULATE");\n')
        with open(os.path.join(tmp, "src", "runtime", "exec", "executor.cc"), "a") as f:
            f.write("void f() { torch::cuda::synchronize(0); }\n")
        caught = check(tmp)
        want = ["src/common/status.cc", "src/runtime/nn/gpt.cc", "src/cli/cli.cc", "src/runtime/exec/executor.cc"]
        missed = [w for w in want if not any(c.startswith(w + ":") for c in caught)]
        if missed or len(caught) != 4:
            print("self-test: expected one finding in each of " + ", ".join(want) + "; got:\n" + "\n".join(caught))
            return 1
        print("self-test: the planted include, literal and synchronisation were caught:\n" + "\n".join(caught))
        return 0


def main():
    args = sys.argv[1:]
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if args and args[0] == "--self-test":
        return self_test(root)
    if args:
        root = args[0]
    broken = check(root)
    for b in broken:
        print(b)
    if not broken:
        print("include arrows: every #include follows docs/architecture.md; HARP_* only in launch/worker_env.cc; "
              "device synchronisations only in " + SYNC_HOME)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
