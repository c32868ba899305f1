#!/usr/bin/env bash
# The build for clusters with V100s, checked on the CPU: harp built against PyPI's torch
# 2.10.0 (CUDA 12.8, kernels sm_70 ... sm_120; `make volta-check` builds it in build-volta)
# names that libtorch, and trains a three-stage pipeline (three local ranks, gpt of 2
# blocks) with exactly the losses of the main build (build/). docs/runtime.md, "Volta".
set -euo pipefail
volta=${1:-build-volta}
main=${2:-build}
venv=${3:-.venv-volta}
"$venv/bin/python" -c 'import torch; archs = torch._C._cuda_getArchFlags().split();
assert "sm_70" in archs, archs; print("libtorch", torch.__version__, "kernels:", " ".join(archs))'
"$volta/src/cli/harp-train" --version | head -3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/model.json" <<'JSON'
{"family": "gpt", "num_blocks": 2, "hidden": 32, "heads": 4, "seq_len": 16, "vocab": 64, "granularity": 1}
JSON
cat > "$dir/plan.json" <<'JSON'
{"version": 1, "microbatches": 4, "microbatch_size": 2, "schedule": "1f1b", "stages": [
  {"layers": [0, 2], "fwd_s": 1, "bwd_s": 2}, {"layers": [2, 3], "fwd_s": 1, "bwd_s": 2},
  {"layers": [3, 4], "fwd_s": 1, "bwd_s": 2}]}
JSON
losses() {
  local harp=$1/src/cli/harp out=$dir/run_$(basename "$1")
  OMP_NUM_THREADS=1 timeout 120 "$harp" launch --nproc 3 -- "$harp" train --plan "$dir/plan.json" \
    --model "$dir/model.json" --steps 4 --out "$out" --quiet > /dev/null
  grep -o '"loss":[^,}]*' "$out/metrics.jsonl"
}
want=$(losses "$main")
got=$(losses "$volta")
echo "losses, main build:  $(echo $want)"
echo "losses, Volta build: $(echo $got)"
[ "$want" = "$got" ] || { echo "volta check: the losses differ"; exit 1; }
echo "volta check: the Volta build trains as the main one does"
