#!/usr/bin/env bash
# Runtime benchmark (not a test): a 2-stage pipeline against one process with the same
# total threads, measured pipeline efficiency against the schedule's ideal M/(M+P-1), and
# the measured iteration time against `harp simulate` on the plan re-timed with the
# measured compute (measured_plan.json). Run on an otherwise idle machine:
#   bench/runtime_pipeline.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
harp="${1:-build}/src/cli/harp"
out=out/bench_runtime
rm -rf "$out" && mkdir -p "$out"
model=examples/models/gpt_small_cpu.json   # 4 blocks, hidden 256, seq 128: L = 6 layers
M=8; MBS=4; STEPS=${STEPS:-12}

stage() { printf '{"layers": [%d, %d], "fwd_s": 1, "bwd_s": 2}' "$1" "$2"; }
printf '{"version": 1, "microbatches": %d, "microbatch_size": %d, "schedule": "1f1b", "stages": [%s]}\n' \
  $M $MBS "$(stage 0 6)" > "$out/one_stage.json"
printf '{"version": 1, "microbatches": %d, "microbatch_size": %d, "schedule": "1f1b", "stages": [%s, %s]}\n' \
  $M $MBS "$(stage 0 3)" "$(stage 3 6)" > "$out/two_stages.json"

common=(--model "$model" --steps "$STEPS" --data synthetic --quiet)
MASTER_PORT=$((20000 + RANDOM % 20000)) "$harp" train --plan "$out/one_stage.json" "${common[@]}" \
  --threads 2 --out "$out/one" --trace-steps 5
"$harp" launch --nproc 2 -- "$harp" train --plan "$out/two_stages.json" "${common[@]}" \
  --threads 1 --out "$out/two" --trace-steps 5 > "$out/two.log"

python3 - "$out" $M <<'PY'
import json, sys
out, M = sys.argv[1], int(sys.argv[2])
def rows(run):
    r = [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
    return r[2:]  # drop warm-up steps
one, two = rows("one"), rows("two")
mean = lambda xs: sum(xs) / len(xs)
t1, t2 = mean([r["iteration_s"] for r in one]), mean([r["iteration_s"] for r in two])
tok1, tok2 = mean([r["tokens_per_s"] for r in one]), mean([r["tokens_per_s"] for r in two])
busy = mean([mean(r["busy_fraction"]) for r in two])
P = 2
print(f"one process, 2 threads : {t1*1e3:8.1f} ms/step  {tok1:9.0f} tokens/s")
print(f"2-stage 1F1B, 2 x 1 thr: {t2*1e3:8.1f} ms/step  {tok2:9.0f} tokens/s  ({tok2/tok1:.2f}x)")
print(f"pipeline efficiency (mean busy fraction): {busy:.3f}   ideal M/(M+P-1) = {M/(M+P-1):.3f}")
PY
for run in one two; do
  sim=$("$harp" simulate --plan "$out/$run/measured_plan.json" --json --trace "$out/$run/simulated_trace.json")
  python3 - "$out/$run" "$sim" <<'PY'
import json, sys
d, sim = sys.argv[1], json.loads(sys.argv[2])
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][1:]
measured = sum(r["iteration_s"] for r in rows) / len(rows)
print(f"{d}: measured {measured*1e3:.1f} ms/step, simulated from measured compute {sim['iteration_s']*1e3:.1f} ms "
      f"({measured/sim['iteration_s']-1:+.1%}); traces: {d}/trace.json vs {d}/simulated_trace.json")
PY
done
