"""Shared parts of the testbed experiments (bench/testbed_*.py): cluster and job files for
the emulated cluster, profiling, planning, training a plan through the shaped links with
`harp launch --testbed`, reading each run's summary.json, and small SVG charts.

Every figure these scripts report is measured in the run that prints it; predictions are
the plan's simulated iteration (what `harp simulate` says), set beside the measurement.
"""
import argparse
import json
import os
import statistics

from bench_util import DEFAULT_HARP, ROOT, corpus, run, write, write_csv  # noqa: F401 (the scripts use tb.*)

# Device types of the emulated pools: slowdown factors against this machine's CPU (the
# runtime sleeps (factor - 1) x each compute, so three ranks fit two cores).
DEVICES = {
    "cpu-a": (0.6, 30, 1.5),
    "cpu-b": (0.3, 15, 3.0),
    "cpu-c": (0.2, 10, 4.5),
}

MODELS = {
    # name: (blocks, hidden, heads, seq). Hidden 256 and up: a block's compute is far above
    # timer noise and the per-call costs a layer-by-layer profile leaves out (at hidden 128
    # one-layer stages ran 40-80% over their profile; docs/testbed.md).
    "gpt-testbed": (8, 256, 4, 64),
    "gpt-testbed-wide": (4, 384, 6, 64),
}


def arguments(doc, extra=None):
    """The flags every experiment takes (--harp, --out, --steps), plus `extra(parser)`."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "bench"))
    ap.add_argument("--steps", type=int, default=6)
    if extra:
        extra(ap)
    return ap.parse_args()


def setup(harp, folder, name, pools, links, model, microbatches, microbatch_size, steps, profile_sizes=None):
    """Writes the cluster and job files of one setup and profiles it: (cluster, job, profile)."""
    cl = write(os.path.join(folder, "cluster.yaml"), cluster_yaml(name, pools, links))
    job = write(os.path.join(folder, "job.yaml"), job_yaml(cl, model, microbatches, microbatch_size, steps))
    return cl, job, profile(harp, job, os.path.join(folder, "profile.json"), profile_sizes)






def cluster_yaml(name, pools, links, memory_gib=None):
    """pools: [(name, device, devices)], links: [(a, b, gbps)], memory_gib: {device: GiB}
    (default 16 each) -> YAML text."""
    used = sorted({d for _, d, _ in pools})
    lines = ["version: 1", "name: %s" % name, "devices:"]
    for d in used:
        peak, bw, slow = DEVICES[d]
        lines.append("  - {name: %s, peak_tflops: %g, memory_gib: %.6g, memory_bandwidth_gbs: %g, "
                     "emulated_slowdown: %g}" % (d, peak, (memory_gib or {}).get(d, 16), bw, slow))
    lines.append("subclusters:")
    for p, d, n in pools:
        extra = ", intra_node: {bandwidth_gbps: 10, latency_us: 30}" if n > 1 else ""
        lines.append("  - {name: %s, device: %s, nodes: 1, devices_per_node: %d%s}" % (p, d, n, extra))
    lines.append("links:")
    for a, b, gbps in links:
        lines.append("  - {between: [%s, %s], bandwidth_gbps: %g, latency_ms: 0.05}" % (a, b, gbps))
    return "\n".join(lines) + "\n"


def job_yaml(cluster_file, model, microbatches, microbatch_size, steps):
    blocks, hidden, heads, seq = MODELS[model]
    return ("version: 1\ncluster: %s\n"
            "model: {family: gpt, name: %s, num_blocks: %d, hidden: %d, heads: %d, seq_len: %d, vocab: 256, "
            "granularity: 2}\n"
            "cost: {gradient_bytes_per_param_byte: 2}\n"
            "planner: {strategy: harp, microbatches: %d, microbatch_size: %d}\n"
            "training: {steps: %d, lr: 1.0e-3, warmup_steps: 2, threads: 1}\n"
            % (os.path.abspath(cluster_file), model, blocks, hidden, heads, seq, microbatches, microbatch_size, steps))






def profile(harp, job, path, microbatch_sizes=None):
    cmd = [harp, "profile", "--job", job, "-o", path]
    if microbatch_sizes:
        cmd += ["--microbatch-sizes", ",".join(str(m) for m in microbatch_sizes)]
    run(cmd)
    return path


def plan(harp, job, profile_file, strategy, path, max_tp=1, extra=()):
    cmd = [harp, "plan", "--job", job, "--profile", profile_file, "--strategy", strategy, "--max-tp", str(max_tp),
           "--output", path] + list(extra)
    run(cmd)
    return json.load(open(path))


def simulate(harp, plan_file, schedule):
    """The plan's simulated iteration under `schedule` (harp simulate --json)."""
    import subprocess
    r = subprocess.run([harp, "simulate", "--plan", plan_file, "--schedule", schedule, "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return json.loads(r.stdout)["iteration_s"]


def train(harp, job, cluster_file, plan_file, data, out_dir, schedule=None, loopback_ranks=0, packet_us=None):
    """Trains the plan through the testbed; returns its summary.json. loopback_ranks > 0:
    that many ranks on 127.0.0.1 instead (emulated devices, links not shaped). packet_us:
    the testbed's packet time (harp launch --testbed-packet-us), else its default."""
    where = (["--nproc", str(loopback_ranks)] if loopback_ranks
             else ["--testbed", cluster_file, "--plan", plan_file])
    if packet_us and not loopback_ranks:
        where += ["--testbed-packet-us", str(packet_us)]
    cmd = [harp, "launch", "--emulate"] + where + ["--",
           harp, "train", "--plan", plan_file, "--job", job, "--data", data, "--out", out_dir, "--quiet"]
    if schedule:
        cmd += ["--schedule", schedule]
    text = run(cmd)
    if "no testbed" in text:
        print("  note: " + text.strip().splitlines()[0])
    return json.load(open(os.path.join(out_dir, "summary.json")))


def median(values):
    return statistics.median(values) if values else float("nan")


# --- SVG -------------------------------------------------------------------------------

COLORS = ["#4c78a8", "#f58518", "#59a14f", "#e45756", "#b279a2", "#72b7b2"]


def _esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _ticks(lo, hi, n=6):
    if hi <= lo:
        hi = lo + 1
    step = (hi - lo) / n
    import math
    mag = 10 ** math.floor(math.log10(step))
    for f in (1, 2, 5, 10):
        if f * mag >= step:
            step = f * mag
            break
    start = math.floor(lo / step) * step
    out = []
    t = start
    while t <= hi + 1e-12:
        out.append(t)
        t += step
    if out[-1] < hi:  # the last tick covers the data
        out.append(out[-1] + step)
    return out


def _svg_start(W, H, L, title):
    return ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="Helvetica,Arial,sans-serif" '
            'font-size="12"><rect width="100%%" height="100%%" fill="#fff"/>' % (W, H),
            '<text x="%d" y="28" font-size="15" font-weight="bold">%s</text>' % (L, _esc(title))]


def line_chart(path, title, xlabel, ylabel, series, log_x=False, note=""):
    """series: [(label, [(x, y)], dashed)] -> an SVG line chart with points."""
    import math
    W, H, L, R, T, B = 820, 460, 80, 200, 50, 60
    xs = [x for _, pts, _ in series for x, _ in pts]
    ys = [y for _, pts, _ in series for _, y in pts if y == y]
    fx = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    x0, x1 = min(fx(x) for x in xs), max(fx(x) for x in xs)
    if x1 == x0:
        x1 = x0 + 1
    yt = _ticks(0, max(ys) * 1.1)
    y1 = yt[-1]
    X = lambda v: L + (fx(v) - x0) / (x1 - x0) * (W - L - R)
    Y = lambda v: H - B - v / y1 * (H - T - B)
    o = _svg_start(W, H, L, title)
    for t in yt:
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" '
                 'text-anchor="end">%g</text>' % (L, W - R, Y(t), Y(t), L - 6, Y(t) + 4, round(t, 6)))
    labels = sorted(set(xs))
    for x in labels[::max(1, len(labels) // 16)]:  # at most about 16 labels
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (X(x), H - B + 18, x))
    o.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % ((L + W - R) / 2, H - 16, _esc(xlabel)))
    o.append('<text x="18" y="%d" transform="rotate(-90 18 %d)" text-anchor="middle">%s</text>'
             % ((T + H - B) / 2, (T + H - B) / 2, _esc(ylabel)))
    for i, (label, pts, dashed) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        pts = sorted(p for p in pts if p[1] == p[1])
        d = " ".join("%.1f,%.1f" % (X(x), Y(y)) for x, y in pts)
        o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>'
                 % (d, c, ' stroke-dasharray="6 4"' if dashed else ""))
        for x, y in pts:
            o.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %g, %g</title></circle>'
                     % (X(x), Y(y), c, _esc(label), x, y))
        o.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>'
                 % (W - R + 12, W - R + 34, T + 10 + 20 * i, T + 10 + 20 * i, c,
                    ' stroke-dasharray="6 4"' if dashed else "", W - R + 40, T + 14 + 20 * i, _esc(label)))
    if note:
        o.append('<text x="%d" y="%d" fill="#555">%s</text>' % (L, H - 2, _esc(note)))
    o.append("</svg>")
    write(path, "\n".join(o) + "\n")


def scatter_chart(path, title, points, note="", second=None, names=("predicted", "")):
    """points: [(label, predicted_s, measured_s)] -> predicted against measured, y = x line;
    `second`, another prediction of the same runs (drawn in a second colour, names[1])."""
    extra = 14 * (len(note.split("\n")) - 1) if note else 0
    W, H, L, R, T, B = 640, 600 + extra, 80, 40, 50, 70 + extra
    hi = max(max(p, m) for _, p, m in points + (second or [])) * 1.1
    ticks = _ticks(0, hi)
    hi = ticks[-1]
    X = lambda v: L + v / hi * (W - L - R)
    Y = lambda v: H - B - v / hi * (H - T - B)
    o = _svg_start(W, H, L, title)
    for t in ticks:
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%g'
                 '</text><text x="%.1f" y="%d" text-anchor="middle">%g</text>'
                 % (L, W - R, Y(t), Y(t), L - 6, Y(t) + 4, round(t, 6), X(t), H - B + 18, round(t, 6)))
    o.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="5 4"/>'
             % (X(0), Y(0), X(hi), Y(hi)))
    for lo_f, hi_f in ((0.9, 1.1),):
        o.append('<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="#4c78a8" fill-opacity="0.08"/>'
                 % (X(0), Y(0), X(hi), Y(hi * lo_f), X(hi / hi_f), Y(hi)))
    for k, (series, colour) in enumerate(((points, "#4c78a8"), (second or [], "#f58518"))):
        for label, p, m in series:
            o.append('<circle cx="%.1f" cy="%.1f" r="4" fill="%s" fill-opacity="0.8"><title>%s: predicted %.3f s, '
                     'measured %.3f s (%+.1f%%)</title></circle>' % (X(m), Y(p), colour, _esc(label), p, m,
                                                                      100 * (p - m) / m))
        if second:
            o.append('<circle cx="%d" cy="%d" r="4" fill="%s"/><text x="%d" y="%d">%s</text>'
                     % (L + 12, T + 12 + 18 * k, colour, L + 22, T + 16 + 18 * k, _esc(names[k])))
    o.append('<text x="%d" y="%d" text-anchor="middle">measured iteration (s)</text>' % ((L + W - R) / 2, H - B + 40))
    o.append('<text x="18" y="%d" transform="rotate(-90 18 %d)" text-anchor="middle">predicted iteration (s)</text>'
             % ((T + H - B) / 2, (T + H - B) / 2))
    for i, line in enumerate(note.split("\n") if note else []):
        o.append('<text x="%d" y="%d" fill="#555">%s</text>' % (L, H - 8 - 14 * (len(note.split("\n")) - 1 - i),
                                                               _esc(line)))
    o.append("</svg>")
    write(path, "\n".join(o) + "\n")


def bar_chart(path, title, groups, series_names, ylabel, note="", wide=False, unit_line=True):
    """groups: [(group label, [value per series])] -> grouped bars; wide: room for many
    groups (labels wrap at spaces); unit_line: a line at 1 (for ratios)."""
    W, H, L, R, T, B = 980, 440, 80, 240, 50, 90
    if wide:
        W, B = max(W, L + R + 120 * len(groups)), 110
    hi = max(v for _, vals in groups for v in vals if v == v) * 1.15
    ticks = _ticks(0, hi)
    hi = ticks[-1]
    Y = lambda v: H - B - v / hi * (H - T - B)
    gw = (W - L - R) / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series_names))
    o = _svg_start(W, H, L, title)
    for t in ticks:
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%g'
                 '</text>' % (L, W - R, Y(t), Y(t), L - 6, Y(t) + 4, round(t, 6)))
    for g, (label, vals) in enumerate(groups):
        gx = L + g * gw + gw * 0.1
        for i, v in enumerate(vals):
            if v != v:
                continue
            o.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.3g</title></rect>'
                     % (gx + i * bw, Y(v), bw - 2, Y(0) - Y(v), COLORS[i % len(COLORS)], _esc(label),
                        _esc(series_names[i]), v))
            o.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.2f</text>'
                     % (gx + i * bw + bw / 2 - 1, Y(v) - 3, v))
        lines = label.split(" ") if wide else [label]
        for j, line in enumerate(lines):
            o.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>'
                     % (L + g * gw + gw / 2, H - B + 18 + 14 * j, _esc(line)))
    for i, name in enumerate(series_names):
        o.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>'
                 % (W - R + 12, T + 20 * i, COLORS[i % len(COLORS)], W - R + 30, T + 10 + 20 * i, _esc(name)))
    o.append('<text x="18" y="%d" transform="rotate(-90 18 %d)" text-anchor="middle">%s</text>'
             % ((T + H - B) / 2, (T + H - B) / 2, _esc(ylabel)))
    if unit_line:
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#444"/>' % (L, W - R, Y(1), Y(1)))
    if note:
        o.append('<text x="%d" y="%d" fill="#555">%s</text>' % (L, H - 20, _esc(note)))
    o.append("</svg>")
    write(path, "\n".join(o) + "\n")


def histogram_chart(path, title, series, xlabel, bin_width, note=""):
    """series: [(label, [value])] -> overlaid histograms (counts per bin of bin_width),
    one colour per series, bars side by side within a bin; a line at 0."""
    import math
    values = [v for _, vs in series for v in vs]
    lo = math.floor(min(values + [0]) / bin_width) * bin_width
    hi = math.ceil(max(values + [0]) / bin_width + 1e-9) * bin_width
    if hi <= lo:
        hi = lo + bin_width
    bins = int(round((hi - lo) / bin_width))
    counts = [[0] * bins for _ in series]
    for k, (_, vs) in enumerate(series):
        for v in vs:
            counts[k][min(bins - 1, int((v - lo) // bin_width))] += 1
    W, H, L, R, T, B = 900, 440, 70, 260, 50, 70
    top = max(max(c) for c in counts)
    yt = _ticks(0, top)
    X = lambda v: L + (v - lo) / (hi - lo) * (W - L - R)
    Y = lambda v: H - B - v / yt[-1] * (H - T - B)
    o = _svg_start(W, H, L, title)
    for t in yt:
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%g'
                 '</text>' % (L, W - R, Y(t), Y(t), L - 6, Y(t) + 4, round(t, 6)))
    step = max(1, bins // 12)
    for i in range(0, bins + 1, step):
        v = lo + i * bin_width
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (X(v), H - B + 18, round(v, 6)))
    bw = (X(lo + bin_width) - X(lo)) / len(series)
    for k, (label, _) in enumerate(series):
        c = COLORS[k % len(COLORS)]
        for i, n in enumerate(counts[k]):
            if n:
                x = X(lo + i * bin_width) + k * bw
                o.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d in [%g, %g)'
                         '</title></rect>' % (x, Y(n), max(1.0, bw - 1), Y(0) - Y(n), c, _esc(label), n,
                                              lo + i * bin_width, lo + (i + 1) * bin_width))
        o.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>'
                 % (W - R + 12, T + 20 * k, c, W - R + 30, T + 10 + 20 * k, _esc(label)))
    o.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#444"/>' % (X(0), X(0), T, H - B))
    o.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % ((L + W - R) / 2, H - B + 40, _esc(xlabel)))
    o.append('<text x="18" y="%d" transform="rotate(-90 18 %d)" text-anchor="middle">count</text>'
             % ((T + H - B) / 2, (T + H - B) / 2))
    if note:
        o.append('<text x="%d" y="%d" fill="#555">%s</text>' % (L, H - 8, _esc(note)))
    o.append("</svg>")
    write(path, "\n".join(o) + "\n")
