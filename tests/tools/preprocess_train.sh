#!/usr/bin/env bash
# Device-side preprocessing end to end: `tessera train --augment` normalises, crops and flips
# on the training device (--preprocess device, the default) or on the host before the upload
# (--preprocess host); both give byte-identical checkpoints on each backend given, because the
# random draws come from the same per-batch generator and crop/flip only move pixels.
#
# Usage: preprocess_train.sh TESSERA FASHION_MNIST_DIR WORK_DIR BACKEND...
set -euo pipefail
tessera=$1 data=$2 work=$3
shift 3
dir=$(mktemp -d "$work/preprocess.XXXXXX")
trap 'rm -rf "$dir"' EXIT
plain=(train --model mlp --epochs 1 --limit 256 --test-limit 64 --batch 32 --data "$data" --deterministic --quiet)
run=("${plain[@]}" --augment)
checked=()
for backend in "$@"; do
  # A backend compiled in without a device here (cuda, hip on this machine) is named, not run.
  if ! probe=$("$tessera" train --model mlp --epochs 1 --limit 8 --test-limit 8 --batch 8 --data "$data" --quiet --backend "$backend" 2>&1); then
    if grep -q "is not available" <<< "$probe"; then echo "$backend: no device here, not checked"; continue; fi
    echo "$probe"; exit 1
  fi
  checked+=("$backend")
  for where in host device; do
    "$tessera" "${run[@]}" --backend "$backend" --preprocess $where --checkpoint "$dir/$backend-$where.safetensors" > /dev/null
  done
  if cmp -s "$dir/$backend-host.safetensors" "$dir/$backend-device.safetensors"; then
    echo "$backend: host and device preprocessing give identical checkpoints"
  else
    echo "$backend: host and device preprocessing differ"
    exit 1
  fi
done
# Augmentation changes what is trained on: without it the weights differ.
"$tessera" "${plain[@]}" --backend "${checked[0]}" --checkpoint "$dir/plain.safetensors" > /dev/null
if cmp -s "$dir/plain.safetensors" "$dir/${checked[0]}-device.safetensors"; then echo "--augment had no effect"; exit 1; fi
echo "preprocess train: ok"
