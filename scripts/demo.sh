#!/usr/bin/env bash
# The main job on the built-in example: describe the cluster and the model, search the
# plan (with the baselines beside it), simulate and draw it, then train a small GPT for
# real with a 3-stage plan on local ranks.
set -eu  # no pipefail: `| head` ends a command early on purpose
cd "$(dirname "$0")/.."
harp="${BUILD:-build}/src/cli/harp"
out=out/demo
mkdir -p "$out"
step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "$2"; eval "$2"; }

step "the cluster" "$harp cluster show examples/clusters/paper_v100_a100.yaml"
step "the model's fine-grained layers (first 6 shown)" \
  "$harp model show gpt-760m --granularity 2 | head -10"
step "HARP's plan, and the baselines on the same problem" \
  "$harp plan --job examples/jobs/demo.yaml --compare"
step "the plan in detail" "$harp plan --job examples/jobs/demo.yaml --output $out/plan.json"
step "simulate it (and draw it)" \
  "$harp simulate --plan $out/plan.json --trace $out/trace.json --svg $out/timeline.svg"
step "the uniform baseline under standard 1F1B and under HARP's 1F1B" \
  "$harp plan --job examples/jobs/demo.yaml --strategy uniform --output $out/uniform.json > /dev/null && \
   $harp simulate --plan $out/uniform.json --svg $out/uniform_1f1b.svg | tail -3 && \
   $harp simulate --plan $out/uniform.json --schedule harp-1f1b --svg $out/uniform_harp.svg | tail -3"
step "a small schedule, drawn per rank" \
  "$harp schedule show --stages 3 --microbatches 6 --kind harp-1f1b --launch-counts 4,2,1"
if "$harp" train --help > /dev/null 2>&1; then
  step "plan GPT-tiny on a 3-device CPU stand-in cluster" \
    "$harp plan --job examples/jobs/tiny_cpu.yaml --output $out/tiny_plan.json | head -8"
  step "byte-level tokens from this project's docs" \
    "cat README.md docs/*.md > $out/corpus.txt && $harp data prepare --input $out/corpus.txt --output $out/corpus.bin"
  step "train it for real: 3 ranks, HARP's 1F1B, the slow device emulated (the job's training section)" \
    "$harp launch --nproc 3 --emulate -- $harp train --plan $out/tiny_plan.json \
     --job examples/jobs/tiny_cpu.yaml --data $out/corpus.bin"
  step "predicted against measured, per stage (the plan was costed by the analytic roofline, far from this CPU)" \
    "$harp simulate --plan $out/tiny_plan.json --trace $out/tiny_predicted.json > /dev/null && \
     $harp trace compare $out/tiny_predicted.json $out/train/trace.json"
fi
printf '\npictures: %s/*.svg; traces (%s/trace.json, %s/train/trace.json) open in ui.perfetto.dev\n' "$out" "$out" "$out"
