#!/usr/bin/env bash
# The main job on the built-in example: describe the cluster and the model, search the
# plan (with the baselines beside it), simulate and draw it; then, on a CPU stand-in
# cluster, measure its links, profile a small GPT, plan from the profile, train that plan
# (and the analytic model's) for real on local ranks, and put prediction beside
# measurement.
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
  job=examples/jobs/cpu_pair.yaml
  step "the CPU stand-in cluster's links, measured here (Gloo over 127.0.0.1), as cluster-file entries" \
    "$harp profile links --cluster examples/clusters/cpu_pair.yaml --quick | tail -6"
  step "profile the model on this CPU: each unique layer once, for each device type of the stand-in cluster" \
    "$harp profile --job $job -o $out/cpu_profile.json"
  step "plan from the profile (and, for comparison, from the analytic roofline)" \
    "$harp plan --job $job --profile $out/cpu_profile.json --output $out/cpu_plan.json | head -9 && \
     $harp plan --job $job --output $out/cpu_plan_analytic.json | sed -n 3,7p"
  step "the profiled plan's stages run here, against their prediction" \
    "$harp profile check --plan $out/cpu_plan.json --quick 2> /dev/null"
  step "byte-level tokens from this project's docs" \
    "cat README.md docs/*.md > $out/corpus.txt && $harp data prepare --input $out/corpus.txt --output $out/corpus.bin"
  step "train the profiled plan for real: 2 ranks, HARP's 1F1B, the slow device emulated (the job's training section)" \
    "$harp launch --nproc 2 --emulate -- $harp train --plan $out/cpu_plan.json --job $job --data $out/corpus.bin \
     --out $out/train 2>&1 | tee $out/train.log | grep -v '] step '"
  step "train the analytic plan on the same cluster" \
    "$harp launch --nproc 2 --emulate -- $harp train --plan $out/cpu_plan_analytic.json --job $job \
     --data $out/corpus.bin --out $out/train_analytic 2>&1 | tee $out/train_analytic.log | grep -v '] step '"
  step "feed the run's measured stage times back: plan again, calibrated to this machine, and train that" \
    "$harp plan --job $job --profile $out/cpu_profile.json --calibrate $out/train/measured_plan.json \
     --output $out/cpu_plan_calibrated.json | grep -E '^predicted|^costs' && \
     $harp launch --nproc 2 --emulate -- $harp train --plan $out/cpu_plan_calibrated.json --job $job \
     --data $out/corpus.bin --out $out/train_calibrated 2>&1 | tee $out/train_calibrated.log | grep 'by the plan'"
  step "predicted against measured, per stage (the profiled plan)" \
    "$harp simulate --plan $out/cpu_plan.json --trace $out/cpu_predicted.json > /dev/null && \
     $harp trace compare $out/cpu_predicted.json $out/train/trace.json"
  printf '\n\033[1m== the two plans, measured in this run\033[0m\n'
  printf '  %-10s %s\n' profile "$(grep -h 'predicted .*/step by the plan' $out/train.log | sed 's/.*\] //')" \
                       analytic "$(grep -h 'predicted .*/step by the plan' $out/train_analytic.log | sed 's/.*\] //')" \
                       calibrated "$(grep -h 'predicted .*/step by the plan' $out/train_calibrated.log | sed 's/.*\] //')"
  "$harp" trace runs $out/train $out/train_analytic $out/train_calibrated --svg $out/curves.svg | grep '^curves'
  # The measured proof: the emulated three-pool cluster with its shaped links, each
  # strategy's plan trained on it, prediction beside measurement.
  tjob=examples/jobs/testbed_three.yaml tcl=examples/clusters/testbed_three.yaml tb=$out/testbed
  launch="$harp launch --emulate --testbed $tcl"
  trainer() { echo "$harp train --job $tjob --data $out/corpus.bin"; }
  shown="grep -E 'by the plan|harp launch: (testbed|note|rank)|harp train:' | sed 's/.*\\] //'"
  mkdir -p "$tb"
  testbed=1
  step "the emulated cluster: a network namespace per pool, links shaped to the cluster file" \
    "$harp testbed up --cluster $tcl || { testbed=0; echo '(no testbed here: the runs below go over 127.0.0.1, unshaped)'; }"
  [ "$testbed" = 1 ] && step "its links measured: messages of 16 KiB to 1 MiB, one way and both at once, against the link model" \
    "$harp testbed probe --cluster $tcl --sizes 16K,64K,256K,1M --repeats 3 --max-message-s 0.3 --svg $tb/probe.svg | tail -2"
  step "profile the model for the three emulated device types" "$harp profile --job $tjob -o $out/testbed_profile.json"
  step "plan: HARP and the baselines, from the profile" \
    "$harp plan --job $tjob --profile $out/testbed_profile.json --compare && \
     for s in harp homogeneous uniform; do \
       $harp plan --job $tjob --profile $out/testbed_profile.json --strategy \$s --output $tb/\$s.json > /dev/null; done"
  step "train each plan through the shaped links (and HARP's plan under standard 1F1B)" \
    "for s in harp homogeneous uniform; do echo \"training the \$s plan\"; \
       $launch --plan $tb/\$s.json -- $(trainer) --plan $tb/\$s.json --out $tb/\$s 2>&1 | $shown; done && \
     echo 'training the harp plan under 1f1b' && \
     $launch --plan $tb/harp.json -- $(trainer) --plan $tb/harp.json --schedule 1f1b --out $tb/harp_as_1f1b 2>&1 | $shown"
  step "HARP's plan, predicted against measured per stage (and drawn: $tb/predicted_vs_measured.svg)" \
    "$harp simulate --plan $tb/harp.json --trace $tb/harp_predicted.json --svg $tb/harp_predicted.svg > /dev/null && \
     $harp trace compare $tb/harp_predicted.json $tb/harp/trace.json --svg $tb/predicted_vs_measured.svg"
  step "take the testbed down" "$harp testbed down --cluster $tcl || true"
  printf '\n\033[1m== measured in this run on the emulated cluster: every strategy, prediction beside measurement\033[0m\n'
  # The headline checks itself: HARP at least 1.3x over both baselines, measured, and
  # every prediction within 15% of its measurement, or the demo fails naming the run.
  check=""
  [ "$testbed" = 1 ] && check="--check harp --min-speedup 1.3 --max-error 0.15"
  "$harp" trace runs $tb/harp $tb/homogeneous $tb/uniform $tb/harp_as_1f1b $check --svg $tb/curves.svg
fi
printf '\npictures: %s/*.svg; traces (%s/trace.json, %s/train/trace.json) open in ui.perfetto.dev\n' "$out" "$out" "$out"
