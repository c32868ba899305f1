#!/usr/bin/env python3
"""What the testbed's shaped links cost a computing rank's CPU clock.

An emulated device is busy f times the CPU time its compute thread needed
(runtime/exec/emulation.h). This kernel has no IRQ time accounting: an interrupt, and the
softirq it raises, is charged to whichever thread it lands on. This experiment measures
how much of that a compute takes while links carry traffic: one thread runs the same
matrix products over and over (an emulated device's compute) and reports its CPU time per
pass, while two links of a three-host testbed carry a paced stream each (below the link's
rate, as a pipeline's activations do), in these conditions:

  quiet              no traffic
  beside 2 computes  no traffic, two more such threads (other processes) computing half
                     of the time, as two emulated devices' ranks on the two cores
  beside 1 busy      no traffic, one more such thread computing all the time: what a
                     compute on the other core costs this one
  beside 1 scalar    no traffic, a Python loop of integer additions on the other core all
                     the time: what any busy neighbour costs, against a vector one
  beside wake-ups    no traffic, a process that sleeps 1 ms at a time, all the time: what
                     a thousand wake-ups a second cost a compute (ranks wake up from their
                     emulated devices' sleeps and for messages)
  loopback           the same bytes per second over 127.0.0.1 (no shaping)
  shaped, N segs     the testbed's links (htb at 0.1 Gbit/s), segmentation offload of at
                     most N segments per packet; N = 4 is the testbed's own setting at
                     this rate (500 us of the link per packet; docs/testbed.md), N = 1 a
                     frame at a time, as a NIC sends
  unshaped veth      the same veths with their qdiscs removed, 1 segment per packet

Needs root (it brings a testbed up and down). Writes OUT/testbed_interrupts.csv and an
SVG bar chart of the CPU time per pass against the quiet one; takes about a minute and a half.

usage: bench/testbed_interrupts.py [--harp PATH] [--out DIR] [--seconds S] [--rate-mbs R]
"""
import os
import subprocess
import sys
import time

import testbed_lib as tb

PYTHON = "/usr/bin/python3"  # Debian's, with torch
PREFIX = "harpirq"

# One thread multiplying an activation by a block's weights (hidden 256, as the testbed's
# model), its CPU time per pass printed as one number per line; `SECONDS [BUSY]` with BUSY
# < 1 sleeps after each pass so that it computes that share of the time.
COMPUTE = r"""
import sys, time, torch
torch.set_num_threads(1)
ws = [torch.randn(256, 1024) for _ in range(24)]
x = torch.randn(64, 256)
end, busy = time.time() + float(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
while time.time() < end:
    c = time.thread_time()
    for w in ws:
        y = (x @ w) @ w.t()
    c = time.thread_time() - c
    print(c, flush=True)
    time.sleep(c * (1 / busy - 1))
"""

# A busy neighbour without vector work: integer additions for SECONDS.
SCALAR = r"""
import sys, time
end, x = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    for i in range(100000):
        x += i
"""

# A neighbour that only wakes up: 1 ms sleeps for SECONDS.
WAKER = r"""
import sys, time
end = time.time() + float(sys.argv[1])
while time.time() < end:
    time.sleep(0.001)
"""

# A paced stream: `recv HOST PORT` counts bytes until the sender closes; `send HOST PORT
# SECONDS BYTES_PER_S` sends 64 KiB messages at that pace.
STREAM = r"""
import socket, sys, time
role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen(1)
    c, _ = s.accept(); n = 0
    while True:
        b = c.recv(1 << 20)
        if not b: break
        n += len(b)
    print(n)
else:
    seconds, rate = float(sys.argv[4]), float(sys.argv[5])
    for attempt in range(100):
        try:
            c = socket.create_connection((host, port)); break
        except OSError:
            time.sleep(0.05)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, t0, k = b"x" * 65536, time.time(), 0
    while time.time() - t0 < seconds:
        c.sendall(buf); k += 1
        time.sleep(max(0.0, t0 + k * len(buf) / rate - time.time()))
    c.close()
"""


def ns(i):
    return "%s-h%d" % (PREFIX, i)


def addr(i):
    return "10.99.0.%d" % (i + 1)


def veths():
    """(namespace, device) of every veth end of the testbed."""
    out = []
    for i in range(3):
        text = subprocess.run(["ip", "-n", ns(i), "-br", "link"], capture_output=True, text=True, check=True).stdout
        out += [(ns(i), line.split()[0].split("@")[0]) for line in text.splitlines() if not line.startswith("lo")]
    return out


def set_segments(n):
    for space, dev in veths():
        subprocess.run(["ip", "-n", space, "link", "set", "dev", dev, "gso_max_segs", str(n)], check=True)


def remove_qdiscs():
    for space, dev in veths():
        subprocess.run(["ip", "netns", "exec", space, "tc", "qdisc", "del", "dev", dev, "root"], check=False,
                       stderr=subprocess.DEVNULL)


def measure(seconds, rate, streams, computes=0, busy=0.5):
    """CPU seconds per pass of COMPUTE (passes after the first) while `streams` run:
    [(sender namespace or None, receiver namespace or None, receiver address)], and
    `computes` more COMPUTE processes busy that share of the time (busy "scalar" or
    "waker": SCALAR or WAKER processes instead)."""
    procs, port = [], 5600
    program, share = {"scalar": (SCALAR, []), "waker": (WAKER, [])}.get(busy, (COMPUTE, [str(busy)]))
    others = [subprocess.Popen([PYTHON, "-c", program, str(seconds + 6)] + share, stdout=subprocess.DEVNULL)
              for _ in range(computes)]
    time.sleep(3 if computes else 0)  # torch imported, computing
    for sender, receiver, host in streams:
        wrap = lambda space: ["ip", "netns", "exec", space] if space else []
        procs.append(subprocess.Popen(wrap(receiver) + [PYTHON, "-c", STREAM, "recv", host, str(port)],
                                      stdout=subprocess.PIPE, text=True))
        procs.append(subprocess.Popen(wrap(sender) + [PYTHON, "-c", STREAM, "send", host, str(port),
                                                      str(seconds + 3), str(rate)]))
        port += 1
    time.sleep(1.5 if streams else 0)  # the streams connected and running
    text = subprocess.run([PYTHON, "-c", COMPUTE, str(seconds)], capture_output=True, text=True, check=True).stdout
    received = []
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 30)
        if out and out.strip():
            received.append(int(out.strip()))
    for p in others:
        p.wait(timeout=seconds + 30)
    passes = [float(v) for v in text.split()][1:]
    return passes, received


def main():
    def extra(ap):
        ap.add_argument("--seconds", type=float, default=8, help="seconds of compute per condition")
        ap.add_argument("--rate-mbs", type=float, default=10, help="each stream's pace, MB/s (links: 12.5)")
    a = tb.arguments(__doc__, extra)
    if os.geteuid() != 0:
        sys.exit("testbed_interrupts: needs root (it brings a testbed up); run it as root")
    os.makedirs(a.out, exist_ok=True)
    cluster = tb.write(os.path.join(a.out, "testbed_interrupts", "cluster.yaml"), tb.cluster_yaml(
        "interrupts", [("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)],
        [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.1)]))
    up = [a.harp, "testbed", "up", "--cluster", cluster, "--prefix", PREFIX]
    rate = a.rate_mbs * 1e6
    shaped = [(ns(0), ns(1), addr(1)), (ns(1), ns(2), addr(2))]  # a -> b and b -> c, as a pipeline's activations
    conditions = [("quiet", None, [], 0, 0), ("beside 2 computes", None, [], 2, 0.5),
                  ("beside 1 busy", None, [], 1, 1.0), ("beside 1 scalar", None, [], 1, "scalar"),
                  ("beside wake-ups", None, [], 1, "waker"),
                  ("loopback", None, [(None, None, "127.0.0.1")] * 2, 0, 0)]
    conditions += [("shaped, %d seg%s" % (n, "s" if n > 1 else ""), n, shaped, 0, 0) for n in (1, 4, 16)]
    conditions += [("unshaped veth", "none", shaped, 0, 0)]
    rows = []
    try:
        for label, segments, streams, computes, busy in conditions:
            if streams and streams[0][0]:
                tb.run(up)  # the testbed's own settings, then this condition's change
                if segments == "none":
                    set_segments(1)
                    remove_qdiscs()
                else:
                    set_segments(segments)
            passes, received = measure(a.seconds, rate, streams, computes, busy)
            rows.append(dict(condition=label, passes=len(passes), cpu_ms_median=1e3 * tb.median(passes),
                             cpu_ms_p10=1e3 * sorted(passes)[len(passes) // 10],
                             stream_mbs=sum(received) / 1e6 / (a.seconds + 3) if received else 0.0))
            quiet = rows[0]["cpu_ms_median"]
            rows[-1]["vs_quiet"] = rows[-1]["cpu_ms_median"] / quiet
            print("%-16s CPU per pass: median %.2f ms (%+.0f%% over quiet), p10 %.2f ms; %d passes; both streams %.1f MB/s"
                  % (label, rows[-1]["cpu_ms_median"], 100 * (rows[-1]["vs_quiet"] - 1), rows[-1]["cpu_ms_p10"],
                     len(passes), rows[-1]["stream_mbs"]), flush=True)
    finally:
        subprocess.run([a.harp, "testbed", "down", "--prefix", PREFIX], capture_output=True)
    tb.write_csv(os.path.join(a.out, "testbed_interrupts.csv"), rows)
    tb.bar_chart(os.path.join(a.out, "testbed_interrupts.svg"),
                 "A compute thread's CPU time per pass while two links carry %.0f MB/s each" % a.rate_mbs,
                 [(r["condition"], [r["vs_quiet"]]) for r in rows], ["CPU time / quiet"], "x the quiet CPU time",
                 note="same work every pass; htb at 0.1 Gbit/s; 4 segs = the testbed's setting")
    print("wrote %s and .svg" % os.path.join(a.out, "testbed_interrupts.csv"))


if __name__ == "__main__":
    main()
