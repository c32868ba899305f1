#!/usr/bin/env bash
# The GPU check (docs/runtime.md, "GPUs"), one short run on a machine with an NVIDIA GPU
# and a CUDA PyTorch: build harp against that PyTorch's libtorch (NCCL on), run the
# GPU-labelled tests, profile GPT-350M's layers in bf16 on the GPU, plan from that
# profile, and train a few steps in bf16 and in fp16 (dynamic loss scaling), printing the
# plan's prediction beside the measured step. The libraries besides libtorch come from
# .gpu/root (scripts/gpu_deps.sh, run where Debian's packages can be fetched) unless the
# machine has them. Everything it writes lands in out/gpu_check/; with OUT set (the
# device tool), a copy of the logs lands there too.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=out/gpu_check
rm -rf "$out" && mkdir -p "$out"
log() { printf '\n== %s\n' "$*"; }
fail=0
run() {  # run "what" command...: prints, keeps going, remembers a failure
  local what=$1; shift
  log "$what"
  echo "\$ $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$out/log.txt"
  local rc=${PIPESTATUS[0]}
  echo "($what: exit $rc, $((SECONDS - t0)) s)"
  [ "$rc" = 0 ] || fail=1
  return "$rc"
}

log "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
deps="$root/.gpu/root/usr"
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))'):${LD_LIBRARY_PATH:-}"
jobs=$(nproc)

build=build-gpu
# The configuration CI compiles and links on every submission (make test with
# HARP_REQUIRE_CUDA=ON: tests/build/check_cuda_build.sh), against this machine's own
# PyTorch; warnings stay warnings here (another compiler than CI's may find new ones).
run "configure against $torch_prefix" \
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHARP_WITH_TORCH=ON -DHARP_REQUIRE_CUDA=ON \
        -DHARP_BUILD_BENCHMARKS=OFF -DHARP_WERROR=OFF "-DCMAKE_PREFIX_PATH=$torch_prefix;$deps" \
  || { echo "GPU CHECK: configure failed"; exit 1; }
run "build harp and the GPU tests ($jobs jobs)" cmake --build "$build" -j"$jobs" --target harp gpu_test \
  || { echo "GPU CHECK: build failed"; exit 1; }
harp="$build/src/cli/harp"
run "what harp-train was built with" "$build/src/cli/harp-train" --version
run "its links" tests/build/check_cuda_build.sh "$build/src/cli/harp-train" "$build/tests/gpu/gpu_test"

run "GPU-labelled tests" bash -c "cd $build && ctest -L gpu --output-on-failure --timeout 300"

job=examples/jobs/gpu_check.yaml
run "profile GPT-350M's unique layers in bf16 on the GPU" \
  "$harp" profile --job "$job" --device H200 --microbatch-sizes 4 --output "$out/profile.json"
run "plan from that profile" "$harp" plan --job "$job" --profile "$out/profile.json" --output "$out/plan.json"
for dtype in bfloat16 float16; do
  run "train 6 steps in $dtype on the GPU" \
    "$harp" train --plan "$out/plan.json" --job "$job" --dtype "$dtype" --steps 6 --out "$out/train_$dtype"
done
run "the same plan on the CPU in float32, 2 steps, for scale" \
  "$harp" train --plan "$out/plan.json" --job "$job" --dtype float32 --device cpu --threads "$jobs" --steps 2 \
  --out "$out/train_cpu"

if [ -n "${OUT:-}" ]; then
  cp "$out/log.txt" "$OUT/gpu_check_log.txt" 2>/dev/null
  for d in "$out"/train_*; do cp "$d/summary.json" "$OUT/summary_${d##*train_}.json" 2>/dev/null; done
fi
[ "$fail" = 0 ] && echo "GPU CHECK: all steps passed" || echo "GPU CHECK: some steps failed (see above)"
exit "$fail"
