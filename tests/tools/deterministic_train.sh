#!/usr/bin/env bash
# Deterministic mode end to end: `tessera train --deterministic` writes bit-identical
# checkpoints on the CPU and on Kokkos with 1 and with 2 threads, and on the emulated GPU under the forward
# and the reverse thread schedule (the emulator's stand-in for two runs of a real GPU, whose
# float atomics land in a different order each time). The GPT run exercises scatter_add (the
# embedding's gradient), the one GPU kernel that switches in deterministic mode; for contrast
# the same emulated runs without the flag are compared too (reported, not required to differ).
#
# Usage: deterministic_train.sh TESSERA FASHION_MNIST_DIR WORK_DIR [emulated]
#   TESSERA_DETERMINISTIC_MODELS="cnn gpt" and TESSERA_DETERMINISTIC_DEVICES="cpu emulated kokkos" (the
#   defaults) pick the models and devices: CTest runs each pair alone.
set -euo pipefail
tessera=$1 data=$2 work=$3 emulated=${4:-}
models=" ${TESSERA_DETERMINISTIC_MODELS:-cnn gpt} "
devices=" ${TESSERA_DETERMINISTIC_DEVICES:-cpu emulated kokkos} "
wants() { [[ "$models" == *" $1 "* ]]; }
on() { [[ "$devices" == *" $1 "* ]]; }
dir=$(mktemp -d "$work/deterministic.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))."; done > "$dir/text"

same() {  # same WHAT A B: the two checkpoints are byte for byte equal
  if cmp -s "$2" "$3"; then echo "$1: identical ($(stat -c %s "$2") bytes)"; else echo "$1: checkpoints differ"; exit 1; fi
}
cnn=(train --model cnn --epochs 1 --test-limit 64 --batch 64 --data "$data" --deterministic --quiet)
if wants cnn && on cpu; then
  "$tessera" "${cnn[@]}" --limit 256 --backend cpu --threads 1 --checkpoint "$dir/cnn-t1.safetensors" > /dev/null
  "$tessera" "${cnn[@]}" --limit 256 --backend cpu --threads 2 --checkpoint "$dir/cnn-t2.safetensors" > /dev/null
  same "cnn on cpu, 1 vs 2 threads" "$dir/cnn-t1.safetensors" "$dir/cnn-t2.safetensors"
fi
gpt=(train --model gpt --data "$dir/text" --steps 4 --eval-every 4 --layers 1 --heads 2 --dim 32 --context 16 --batch 8 --quiet)
if wants gpt && on cpu; then
  "$tessera" "${gpt[@]}" --deterministic --backend cpu --threads 1 --checkpoint "$dir/gpt-t1.safetensors" > /dev/null
  "$tessera" "${gpt[@]}" --deterministic --backend cpu --threads 2 --checkpoint "$dir/gpt-t2.safetensors" > /dev/null
  same "gpt on cpu, 1 vs 2 threads" "$dir/gpt-t1.safetensors" "$dir/gpt-t2.safetensors"
fi
# Kokkos: the thread count of its host execution space (OpenMP reads OMP_NUM_THREADS; a Serial
# build runs one thread either way). Deterministic mode keeps the vendor BLAS out of the GEMMs
# (OpenBLAS splits K by thread count for small M x N).
if on kokkos; then
  for t in 1 2; do
    if wants cnn; then
      OMP_NUM_THREADS=$t OMP_PROC_BIND=false "$tessera" "${cnn[@]}" --limit 256 --backend kokkos --checkpoint "$dir/cnn-kokkos-t$t.safetensors" > /dev/null
    fi
    if wants gpt; then
      OMP_NUM_THREADS=$t OMP_PROC_BIND=false "$tessera" "${gpt[@]}" --deterministic --backend kokkos --checkpoint "$dir/gpt-kokkos-t$t.safetensors" > /dev/null
    fi
  done
  if wants cnn; then same "cnn on kokkos, 1 vs 2 threads" "$dir/cnn-kokkos-t1.safetensors" "$dir/cnn-kokkos-t2.safetensors"; fi
  if wants gpt; then same "gpt on kokkos, 1 vs 2 threads" "$dir/gpt-kokkos-t1.safetensors" "$dir/gpt-kokkos-t2.safetensors"; fi
fi
if [[ "$emulated" == emulated ]] && on emulated; then
  for schedule in forward reverse; do
    if wants cnn; then
      TESSERA_EMU_SCHEDULE=$schedule "$tessera" "${cnn[@]}" --limit 64 --backend emulated --checkpoint "$dir/cnn-$schedule.safetensors" > /dev/null
    fi
    if wants gpt; then
      TESSERA_EMU_SCHEDULE=$schedule "$tessera" "${gpt[@]}" --deterministic --backend emulated --checkpoint "$dir/gpt-$schedule.safetensors" > /dev/null
      TESSERA_EMU_SCHEDULE=$schedule "$tessera" "${gpt[@]}" --backend emulated --checkpoint "$dir/gpt-free-$schedule.safetensors" > /dev/null
    fi
  done
  wants cnn && same "cnn on emulated, forward vs reverse schedule" "$dir/cnn-forward.safetensors" "$dir/cnn-reverse.safetensors"
  if ! wants gpt; then echo "deterministic train: ok"; exit 0; fi
  same "gpt on emulated, forward vs reverse schedule" "$dir/gpt-forward.safetensors" "$dir/gpt-reverse.safetensors"
  if cmp -s "$dir/gpt-free-forward.safetensors" "$dir/gpt-free-reverse.safetensors"; then
    echo "gpt on emulated without --deterministic: identical as well"
  else
    echo "gpt on emulated without --deterministic: checkpoints differ (float atomics in schedule order), as expected"
  fi
fi
echo "deterministic train: ok"
