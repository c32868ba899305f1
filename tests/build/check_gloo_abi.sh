#!/usr/bin/env bash
# The Gloo pairing stays sound (src/runtime/comm/gloo_group.h): the project compiles
# ProcessGroupGloo.hpp against Debian's Gloo headers (2022), while libtorch carries a newer
# Gloo; that is safe only while the project's code touches Gloo by pointer. So no object
# of the runtime may define or reference a symbol of namespace gloo, nor define a member,
# vtable or typeinfo of c10d::ProcessGroupGloo or of a class in it (GlooStore derives
# from Gloo's Store, whose virtuals differ between the two Gloos); every such call goes
# to libtorch. And no binary loads Debian's libgloo beside the Gloo inside libtorch.
# Usage: check_gloo_abi.sh RUNTIME_ARCHIVE BINARY...
set -uo pipefail
archive=$1
shift
fail=0
syms=$(nm -C "$archive" 2>/dev/null) || { echo "FAILED: nm $archive"; exit 1; }
# nm -C lines: "[address] TYPE name"; U lines have no address.
bad=$(awk '{
  if ($1 == "U") { type = $1; $1 = "" } else { type = $2; $1 = ""; $2 = "" }
  name = substr($0, 1); sub(/^ +/, "", name)
  if (name ~ /^gloo::/ || name ~ /^(vtable|typeinfo|typeinfo name|VTT|construction vtable) for (gloo::|c10d::ProcessGroupGloo)/)
    print type " " name
  else if (type != "U" && name ~ /^c10d::ProcessGroupGloo/)
    print type " " name
}' <<< "$syms" | sort -u)
if [ -n "$bad" ]; then
  echo "FAILED: $(basename "$archive") compiles or calls Gloo code itself (Debian's 2022 Gloo layouts, not libtorch's):"
  echo "$bad" | head -20
  echo "fix: reach Gloo only through the out-of-line functions of c10d::ProcessGroupGloo (gloo_group.cc)"
  fail=1
else
  echo "ok: $(basename "$archive") defines and references no Gloo symbol; ProcessGroupGloo only through libtorch:"
  grep -E ' U c10d::ProcessGroupGloo' <<< "$syms" | sed 's/^ *U /  /' | sed 's/(.*//' | sort -u
fi
for bin in "$@"; do
  if ldd "$bin" | grep -q 'libgloo'; then
    echo "FAILED: $(basename "$bin") loads $(ldd "$bin" | grep -o 'libgloo[^ ]*' | head -1) beside libtorch's own Gloo"
    fail=1
  else
    echo "ok: $(basename "$bin") loads no libgloo (Gloo comes from libtorch_cpu)"
  fi
done
exit "$fail"
