#!/usr/bin/env bash
# The module build as a user meets it (label "tools"): the installed tree is relocatable, the
# command and libtessera need no vendor runtime, MPI or libtorch to start, every module of the
# build loads from lib/tessera/ beside libtessera, and without the modules (or with a broken
# one) each backend is listed as unavailable with the loader's reason while the CPU trains.
#   modules_check.sh <build dir> <work dir> <Fashion-MNIST dir>
set -euo pipefail
build=$1 work=$2 data=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
mv "$work/prefix" "$work/moved"  # relocated: only $ORIGIN-relative run paths can find anything
root=$work/moved
tessera=$root/bin/tessera
libtessera=$(find "$root" -name 'libtessera.so' | head -n 1)
[[ -n $libtessera ]] || fail "no libtessera.so installed"
libdir=$(dirname "$libtessera")
run() { env -i PATH=/usr/bin:/bin HOME="$work" ${TESSERA_BACKEND_PATH:+TESSERA_BACKEND_PATH="$TESSERA_BACKEND_PATH"} "$@"; }

# 1. What the command and the library need to start.
forbidden='cuda|cublas|cudnn|nccl|nvrtc|amdhip|hiprtc|rocblas|rccl|mpi|torch|c10|kokkos|trilinos|dnnl|openblas|boost'
for f in "$tessera" "$libtessera"; do
  needed=$(readelf -d "$f" | awk '/NEEDED/ {print $5}' | tr -d '[]')
  [[ -n $needed ]] || fail "readelf found no NEEDED entry in $f"
  if bad=$(grep -Ei "$forbidden" <<<"$needed"); then fail "$f needs $bad"; fi
  echo "$(basename "$f") needs: $(tr '\n' ' ' <<<"$needed")"
done

# 2. Every module of the build loads from the relocated tree.
run "$tessera" info > "$work/info.txt" || fail "tessera info failed: $(cat "$work/info.txt")"
modules=$(sed -n 's/^  module \([a-z_]*\): .*/\1/p' "$work/info.txt")
[[ -n $modules ]] || fail "tessera info lists no modules: $(cat "$work/info.txt")"
for m in $modules; do
  grep -q "^  module $m: loaded from $libdir/tessera/libtessera_$m.so" "$work/info.txt" || fail "module $m did not load: $(grep "^  module $m:" "$work/info.txt")"
done
echo "modules loaded: $(tr '\n' ' ' <<<"$modules")"

# 3. A module that is not a library: that backend is unavailable, with the loader's message.
mkdir -p "$work/broken"
echo "not an ELF file" > "$work/broken/libtessera_emulated.so"
if grep -qx emulated <<<"$modules"; then
  TESSERA_BACKEND_PATH=$work/broken run "$tessera" info > "$work/info_broken.txt"
  grep -Eq "^  emulated: module libtessera_emulated.so: .*(invalid ELF header|file too short)" "$work/info_broken.txt" ||
    fail "a broken emulated module is not reported: $(cat "$work/info_broken.txt")"
fi

# 4. No modules at all: the program starts, names each missing one, and the CPU trains.
rm -rf "$libdir/tessera"
run "$tessera" info > "$work/info_none.txt" || fail "tessera info without modules failed"
for m in $modules; do
  grep -q "not found in $libdir/tessera" <(grep -E "^  module $m: " "$work/info_none.txt") || fail "module $m not reported missing: $(cat "$work/info_none.txt")"
done
for b in cuda hip kokkos emulated; do
  grep -qx "$b" <<<"$modules" || continue
  if out=$(run "$tessera" demo --device "$b" 2>&1); then fail "demo on $b ran without its module"; fi
  grep -q "libtessera_$b.so not found" <<<"$out" || fail "the error for $b does not name its module: $out"
done
run "$tessera" train --model mlp --backend cpu --epochs 1 --limit 512 --test-limit 256 --data "$data" > "$work/train.txt" 2>&1 ||
  fail "training on the CPU without modules failed: $(tail -n 5 "$work/train.txt")"
grep -q "test_acc" "$work/train.txt" || fail "no test accuracy: $(tail -n 5 "$work/train.txt")"
echo "modules check: ok"
