"""A run's per-step records, torch-free: what `harp train` and train_pipelined.py write to
OUT/metrics.jsonl (the tests and benches read both runtimes' with it)."""

import json
import os


def read_step_metrics(run_dir):
    """The per-step records of a run's metrics.jsonl (harp train's or train_pipelined.py's)."""
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        for line in fh:
            j = json.loads(line)
            if "loss" in j and "step" in j:
                out.append(j)
    return out
