#!/usr/bin/env python3
"""The documented limits at full scale (docs/file_formats.md, Limits): each input at or
near its limit, run through `harp`, with the wall time and the peak anonymous memory
(RssAnon, sampled every 20 ms: a token file read in place shows as page cache, which the
kernel can drop, not as memory the process holds). The unit tests run the same paths at
reduced scale; this is the once-at-full-scale check.

  token file   1.5 GiB of uint16 tokens trained for one step (gpt-tiny, one rank)
  text         900 MB through `harp data prepare` (byte-level)
  cost table   4,096 layers planned on two pools (examples/clusters/a100_v100_sailor.yaml)
  devices      GPT-76B on 4 pools of 16,384 and of 65,536 devices in all, idle devices allowed
  subclusters  3,000 subclusters: refused at parse (the limit is 1,024)

Writes out/bench/limits/limits.csv and limits.svg (peak MiB per case).

usage: bench/limits.py [--harp PATH] [--out DIR] [--work DIR]
"""
import json
import os
import subprocess
import sys
import time

from bench_util import DEFAULT_HARP, ROOT, write, write_results


def peak_anon(cmd, cwd):
    """(returncode, seconds, peak RssAnon MiB, stderr tail) of cmd."""
    start = time.time()
    err_path = os.path.join(cwd, "stderr.txt")
    with open(err_path, "w") as err:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while p.poll() is None:
            try:
                with open("/proc/%d/status" % p.pid) as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.02)
    tail = open(err_path).read()[-300:].strip().replace("\n", " | ")
    return p.returncode, time.time() - start, peak / 1024.0, tail


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench", "limits"))
    ap.add_argument("--work", default="/tmp/harp_limits")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    w = a.work
    rows = []

    def case(name, size, cmd, want_rc=0):
        rc, secs, mib, tail = peak_anon(cmd, w)
        ok = rc == want_rc
        print("%-12s %-28s rc %d%s  %.1f s  peak anon %.0f MiB  %s" % (
            name, size, rc, "" if ok else " (expected %d)" % want_rc, secs, mib, tail[:160] if not ok or rc else ""))
        rows.append({"case": name, "size": size, "exit": rc, "expected_exit": want_rc, "seconds": round(secs, 2),
                     "peak_anon_mib": round(mib, 1)})

    # A token file of 1.5 GiB (raw uint16), one training step on it.
    tokens = os.path.join(w, "tokens.bin")
    if not os.path.exists(tokens) or os.path.getsize(tokens) != 3 << 29:
        block = bytes(b for i in range(256) for b in (i, 0)) * (1 << 11)  # 1 MiB of uint16 ids below 256
        with open(tokens, "wb") as f:
            for _ in range(1536):
                f.write(block)
    write(os.path.join(w, "one.yaml"), "version: 1\nname: one\nsubclusters:\n"
          "  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}\n")
    write(os.path.join(w, "job.yaml"), "version: 1\ncluster: one.yaml\nmodel: {family: gpt, preset: gpt-tiny}\n"
          "planner: {microbatches: 2, microbatch_size: 2}\n")
    subprocess.run([a.harp, "plan", "--job", "job.yaml", "--output", "p.json"], cwd=w, check=True,
                   stdout=subprocess.DEVNULL)
    case("token file", "1.5 GiB (limit 4 GiB)", [a.harp, "train", "--plan", "p.json", "--data", tokens, "--steps", "1",
                                                  "--out", "run", "--quiet"])
    # 900 MB of text through data prepare.
    text = os.path.join(w, "text.txt")
    if not os.path.exists(text) or os.path.getsize(text) < 900 * 10**6:
        line = ("The pipeline stage sends its activations over the slow link. " * 4 + "\n").encode()
        with open(text, "wb") as f:
            chunk = line * (1 << 14)
            while f.tell() < 900 * 10**6:
                f.write(chunk)
    case("text", "900 MB (limit 1 GiB)", [a.harp, "data", "prepare", "--input", text, "--output", "text.bin"])
    # A cost table of 4,096 layers.
    costs = json.load(open(os.path.join(ROOT, "examples", "costs", "opt350_sailor_mbs4.json")))
    n = 4096
    layers = costs["layers"]
    mid = layers[1]
    costs["layers"] = [layers[0]] + [dict(mid, name="l%d" % i, param_bytes=mid["param_bytes"] * 24 / n)
                                     for i in range(n - 2)] + [layers[-1]]
    for dev in costs["devices"].values():
        for t in dev.values():
            for k in t:
                t[k] = [t[k][0]] + [t[k][1] * 24 / n] * (n - 2) + [t[k][-1]]
    write(os.path.join(w, "c4096.json"), json.dumps(costs))
    case("cost table", "4,096 layers (limit 4,098)", [a.harp, "plan", "--cluster",
                                                      os.path.join(ROOT, "examples", "clusters", "a100_v100_sailor.yaml"),
                                                      "--costs", "c4096.json", "--microbatches", "8"], want_rc=3)
    # 16,384 devices in four pools.
    pools = open(os.path.join(ROOT, "examples", "clusters", "four_pools_1024.yaml")).read().replace("nodes: 32",
                                                                                                  "nodes: 512")
    write(os.path.join(w, "pools.yaml"), pools)
    write(os.path.join(w, "pools_job.yaml"), "version: 1\ncluster: pools.yaml\nmodel: {family: gpt, preset: gpt-76b, "
          "granularity: 4}\nplanner: {strategy: harp, microbatches: 128, microbatch_size: 8}\n")
    case("devices", "16,384 (limit 65,536)", [a.harp, "plan", "--job", "pools_job.yaml", "--allow-idle-devices"])
    write(os.path.join(w, "pools_max.yaml"), pools.replace("nodes: 512", "nodes: 2048"))
    write(os.path.join(w, "pools_max_job.yaml"), open(os.path.join(w, "pools_job.yaml")).read().replace(
        "pools.yaml", "pools_max.yaml"))
    case("devices", "65,536 (the limit)", [a.harp, "plan", "--job", "pools_max_job.yaml", "--allow-idle-devices"])
    # 3,000 subclusters: past the limit, refused while reading.
    subs = ["version: 1", "name: many", "subclusters:"]
    for i in range(3000):
        subs.append("  - {name: s%d, device: %s, nodes: 1, devices_per_node: 4, intra_node: {bandwidth_gbps: 1200, "
                    "latency_us: 5}}" % (i, "A100-40GB" if i % 2 == 0 else "V100-16GB"))
    subs.append("links:")
    for i in range(2999):
        subs.append("  - {between: [s%d, s%d], bandwidth_gbps: 10, latency_ms: 1}" % (i, i + 1))
    write(os.path.join(w, "k3000.yaml"), "\n".join(subs) + "\n")
    case("subclusters", "3,000 (limit 1,024)", [a.harp, "cluster", "show", "k3000.yaml"], want_rc=1)

    write_results(a.out, "limits", rows, "Peak anonymous memory (MiB) at the documented limits",
                  "case", "peak_anon_mib")
    if any(r["exit"] != r["expected_exit"] for r in rows):
        sys.exit("a case ended with an unexpected exit code")


if __name__ == "__main__":
    main()
