#!/usr/bin/env bash
# The main job on the built-in example: describe the cluster and the model, plan, then
# simulate the plan under standard 1F1B and under HARP's 1F1B, writing pictures.
set -euo pipefail
cd "$(dirname "$0")/.."
harp="${BUILD:-build}/src/cli/harp"
out=out/demo
mkdir -p "$out"
step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "$2"; eval "$2"; }

step "the cluster" "$harp cluster show examples/clusters/paper_v100_a100.yaml"
step "the model's fine-grained layers (first 8 shown)" \
  "$harp model show gpt-760m --granularity 2 | head -12"
step "a first plan (uniform strategy)" \
  "$harp plan --job examples/jobs/demo.yaml --output $out/plan.json"
step "simulate it with standard 1F1B" \
  "$harp simulate --plan $out/plan.json --trace $out/1f1b_trace.json --svg $out/1f1b.svg"
step "the same plan with HARP's heterogeneity-aware 1F1B" \
  "$harp simulate --plan $out/plan.json --schedule harp-1f1b --trace $out/harp_trace.json --svg $out/harp.svg"
step "a small schedule, drawn per rank" \
  "$harp schedule show --stages 3 --microbatches 6 --kind harp-1f1b --launch-counts 4,2,1"
printf '\npictures: %s/1f1b.svg %s/harp.svg; traces open in ui.perfetto.dev\n' "$out" "$out"
