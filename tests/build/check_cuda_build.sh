#!/usr/bin/env bash
# The CUDA build links (issue: compile the GPU path in CI): harp-train and gpu_test resolve
# libtorch_cuda and NCCL, and `harp-train --version` names the CUDA, cuDNN and NCCL
# versions. Nothing here runs on a GPU; scripts/gpu_check.sh does that on a GPU machine.
# Usage: check_cuda_build.sh HARP_TRAIN GPU_TEST
set -uo pipefail
fail=0
check() { if "$@"; then echo "ok: ${msg}"; else echo "FAILED: ${msg}"; fail=1; fi; }
for bin in "$1" "$2"; do
  deps=$(ldd "$bin") || { echo "FAILED: ldd $bin"; exit 1; }
  msg="$(basename "$bin"): every library resolves"
  check bash -c "! grep -q 'not found' <<< \"\$0\"" "$deps"
  for lib in libtorch_cuda.so libc10_cuda.so libnccl.so.2 libcudart.so.13; do
    msg="$(basename "$bin") -> $lib: $(grep -o "$lib => [^ ]*" <<< "$deps")"
    check grep -q "$lib => /" <<< "$deps"
  done
done
version=$("$1" --version) || { echo "FAILED: $1 --version exited $?"; exit 1; }
echo "$version"
for pattern in '^harp [0-9]+\.[0-9]+\.[0-9]+$' '^libtorch 2\.' '^CUDA 1[0-9]\.[0-9]+ ' '^cuDNN [0-9]+\.[0-9]+\.[0-9]+ ' \
               '^NCCL 2\.[0-9]+\.[0-9]+ loaded' '^c10d: Gloo, NCCL$'; do
  msg="--version has /$pattern/"
  check grep -Eq "$pattern" <<< "$version"
done
exit "$fail"
