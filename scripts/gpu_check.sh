#!/usr/bin/env bash
# The one-GPU check (docs/runtime.md, "GPUs"), made to finish within 8 minutes on one H100
# or H200, each step under its own timeout and named when it fails:
#   build  harp, harp-train and the GPU tests against this machine's PyTorch, with every
#          core, nothing else (the libraries besides libtorch from .gpu/root:
#          scripts/gpu_deps.sh, run where Debian's packages can be fetched);
#   (a)    the GPU tests (tests/gpu): one rank's layers, optimizer and executor on CUDA
#          against the CPU, and 2- and 4-stage plans trained on the one GPU by thread ranks
#          over the in-memory transport on CUDA tensors (the stream semantics of
#          runtime/exec/compute_stream.h for real), losses equal to the CPU's within the
#          tests' tolerances;
#   (b, c) bench/gpu_vs_pytorch.py: tokens/s and MFU of GPT-350M and a LLaMA-1B shape on
#          one rank against PyTorch 2.11 eager and torch.compile of the same model, batch
#          and dtype on the same GPU, as ratios; the plan's predicted step and memory
#          against the measured.
# Usage: scripts/gpu_check.sh [--dry-run] [--build DIR]
#   --dry-run  the same steps on the CPU, tiny shapes, with an existing build (DIR,
#              default build): the script's own logic, which `make test` runs
#              (tests/build: gpu_check_dry_run) so it is known to work before a GPU runs it.
# Everything lands in out/gpu_check/ (DIR/gpu_check_dry/ for a dry run); with OUT set (the
# device tool) the log, the CSV and the summaries are copied there too.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dry=0
build=build-gpu
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; build=build ;;
    --build) build=$2; shift ;;
    *) echo "gpu_check.sh: unknown argument $1 (use --dry-run, --build DIR)"; exit 2 ;;
  esac
  shift
done
out=out/gpu_check
[ "$dry" = 1 ] && out=$build/gpu_check_dry
rm -rf "$out" && mkdir -p "$out"
failed=()
# step NAME SECONDS command...: prints, runs under a timeout, names a failure, goes on.
step() {
  local name=$1 limit=$2; shift 2
  printf '\n== %s (at most %d s)\n$ %s\n' "$name" "$limit" "$*"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$out/log.txt"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "(timed out after $limit s)"
  echo "($name: exit $rc, $((SECONDS - t0)) s)"
  [ "$rc" = 0 ] || failed+=("$name")
  return "$rc"
}

if [ "$dry" = 1 ]; then
  python=$root/.venv/bin/python  # the PyTorch harp links (make installs it)
  device_env=(HARP_GPU_TEST_DEVICE=cpu)
  [ -x "$build/src/cli/harp" ] || { echo "GPU CHECK (dry run): no build at $build (make build first)"; exit 1; }
else
  python=python3
  device_env=()
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  "$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
                                    torch.cuda.get_device_name(0))'
  deps="$root/.gpu/root/usr"
  torch_lib=$("$python" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:$torch_lib:${LD_LIBRARY_PATH:-}"
  # The configuration CI compiles and links on every submission (make test with
  # HARP_REQUIRE_CUDA=ON), against this machine's PyTorch; warnings stay warnings here.
  step "configure" 120 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHARP_WITH_TORCH=ON -DHARP_REQUIRE_CUDA=ON \
    -DHARP_BUILD_BENCHMARKS=OFF -DHARP_WERROR=OFF "-DCMAKE_PREFIX_PATH=$torch_prefix;$deps" \
    || { echo "GPU CHECK: configure failed"; exit 1; }
  step "build harp and the GPU tests ($(nproc) jobs)" 300 cmake --build "$build" -j"$(nproc)" --target harp gpu_test \
    || { echo "GPU CHECK: build failed"; exit 1; }
  step "what harp-train was built with" 30 "$build/src/cli/harp-train" --version
fi

step "(a) the GPU tests: one rank against the CPU, 2- and 4-stage pipelines on the one GPU" 240 \
  env "${device_env[@]}" "$build/tests/gpu/gpu_test" --gtest_brief=1
bench=(bench/gpu_vs_pytorch.py --harp "$build/src/cli/harp" --python "$python" --out "$out/bench")
[ "$dry" = 1 ] && bench+=(--dry-run)
step "(b, c) harp against PyTorch 2.11 eager and torch.compile; predicted against measured" 420 \
  "$python" "${bench[@]}"

if [ -n "${OUT:-}" ]; then
  cp "$out/log.txt" "$OUT/gpu_check_log.txt" 2>/dev/null
  cp "$out/bench/gpu_vs_pytorch.csv" "$OUT/" 2>/dev/null
  for s in "$out"/bench/*/harp_*/summary.json; do
    [ -f "$s" ] && cp "$s" "$OUT/summary_$(basename "$(dirname "$s")").json"
  done
fi
if [ ${#failed[@]} = 0 ]; then
  echo "GPU CHECK$([ "$dry" = 1 ] && echo ' (dry run)'): all steps passed"
  exit 0
fi
echo "GPU CHECK$([ "$dry" = 1 ] && echo ' (dry run)'): failed: $(printf '%s; ' "${failed[@]}")"
exit 1
