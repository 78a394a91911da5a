#!/usr/bin/env bash
# The AVX-512 kernel set must not leak into code an AVX2-only CPU runs (backends/cpu/isa.h):
# every function of the library that holds an AVX-512 instruction (a zmm, opmask or
# xmm16-31/ymm16-31 register, an embedded broadcast, or an AVX-512-only mnemonic) must belong
# to tessera::cpu::avx512 (its name mentions that namespace: a template instantiated on a
# variant type is only reachable from the variant) or be the AVX512_BF16 micro-kernel or the AMX tile unit (gemm_amx_tiles.cpp). First the check proves it can
# fail: a planted AVX-512 function outside those namespaces must be caught.
# Usage: isa_leak_check.sh <libtessera.a or .so> <c++ compiler>
set -euo pipefail
lib="$1"
cxx="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

avx512_functions() {  # object/library -> names of functions holding AVX-512 instructions
  objdump -d --no-show-raw-insn -C "$1" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn); next }
    /%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\{1to|vpternlog|vpermt2|vpermi2|vdpbf16|vcvtneps2bf16|vpmov(us|s)?(qb|qw|qd|db|dw|wb)[[:space:]]|vrndscale|vscalef|vgetexp|vgetmant|vfixupimm|vrcp14|vrsqrt14|ldtilecfg|tileloadd|tilestored|tilezero|tdpb/ {
      if (!(fn in seen)) { seen[fn] = 1; print fn }
    }'
}
allowed='tessera::cpu::avx512::|^tessera::cpu::bf16::micro_kernel\(|^tessera::cpu::amx::hardware_block\(|^tessera::cpu::amx::\(anonymous namespace\)::HardwareTiles|^void tessera::cpu::amx::run_block<tessera::cpu::amx::\(anonymous namespace\)::HardwareTiles>'

cat > "$work/planted.cpp" <<'CPP'
namespace tessera::cpu::base { void planted(float* x, int n) { for (int i = 0; i < n; ++i) x[i] = x[i] * 2.0f + 1.0f; } }
CPP
"$cxx" -std=c++20 -O3 -mavx512f -mprefer-vector-width=512 -c "$work/planted.cpp" -o "$work/planted.o"
if ! avx512_functions "$work/planted.o" | grep -Ev "$allowed" | grep -q planted; then
  echo "isa-leak: the check missed a planted AVX-512 function; it cannot be trusted" >&2
  exit 1
fi

found="$(avx512_functions "$lib")"
total="$(printf '%s\n' "$found" | grep -c . || true)"
leaks="$(printf '%s\n' "$found" | grep -Ev "$allowed" | grep . || true)"
if [[ -n "$leaks" ]]; then
  echo "isa-leak: AVX-512 instructions outside the AVX-512 kernel set (they would fault on AVX2-only CPUs):" >&2
  printf '  %s\n' "$leaks" | head -40 >&2
  exit 1
fi
if [[ "$total" -eq 0 ]]; then
  echo "isa-leak: no AVX-512 function found at all: is the AVX-512 kernel set in $lib?" >&2
  exit 1
fi
echo "isa-leak: $total functions hold AVX-512 instructions, all in tessera::cpu::avx512 or the bf16 micro-kernel"
