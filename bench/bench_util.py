"""Helpers every bench script shares: running `harp`, writing files, the token corpus."""
import argparse
import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_HARP = os.path.join(ROOT, "build", "src", "cli", "harp")
# The PyTorch harp links (make installs the pinned PyPI torch here) and Debian's
# python3-torch 1.13, the earlier baseline.
TORCH_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
DEBIAN_PYTHON = "/usr/bin/python3"


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout[-3000:], r.stderr[-3000:]))
    return r.stdout + r.stderr


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def corpus(harp, out):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "corpus.bin")
    if not os.path.exists(path):
        text = os.path.join(out, "corpus.txt")
        with open(text, "w") as f:
            for name in ["README.md"] + sorted(os.listdir(os.path.join(ROOT, "docs"))):
                p = os.path.join(ROOT, name) if name == "README.md" else os.path.join(ROOT, "docs", name)
                if p.endswith(".md"):
                    f.write(open(p).read())
        run([harp, "data", "prepare", "--input", text, "--output", path])
    return path


def bar_chart(path, title, bars):
    """A horizontal bar chart (SVG) of (label, value, color) bars, values printed beside."""
    width, left, bar_h, gap = 820, 320, 22, 8
    height = 50 + len(bars) * (bar_h + gap)
    top = max(v for _, v, _ in bars) * 1.25
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
           % (width, height), '<text x="10" y="20" font-size="14">%s</text>' % title]
    for i, (label, value, color) in enumerate(bars):
        y = 40 + i * (bar_h + gap)
        w = (width - left - 90) * value / top
        out.append('<text x="10" y="%d" font-size="11">%s</text>' % (y + 15, label))
        out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (left, y, w, bar_h, color))
        out.append('<text x="%.1f" y="%d">%.0f</text>' % (left + w + 6, y + 15, value))
    out.append("</svg>")
    write(path, "\n".join(out) + "\n")


def write_results(out, name, rows, title, label, value):
    """OUT/NAME.csv of the rows and OUT/NAME.svg, a bar per row (row[label], row[value])."""
    write_csv(os.path.join(out, name + ".csv"), rows)
    bar_chart(os.path.join(out, name + ".svg"), title, [(r[label], r[value], "#4c72b0") for r in rows])
    print("wrote %s/%s.csv and .svg" % (out, name))


def bench_args(out_name, steps):
    """--harp, --steps and --out (created: out/<out_name> by default)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--harp", default=DEFAULT_HARP)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", out_name))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    return a
