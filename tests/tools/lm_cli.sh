#!/usr/bin/env bash
# `tessera train --model gpt|lstm` and `tessera generate` end to end on a small text: a short
# run checkpoints, generate continues the prompt identically with and without the KV cache (on
# the CPU and on every other backend given), and bad data is a one-line error.
set -euo pipefail
tessera=$1 work=$2
shift 2
dir=$(mktemp -d "$work/lm_cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for i in $(seq 300); do echo "the quick brown fox jumps over the lazy dog $((i % 7))."; done > "$dir/text"

"$tessera" train --model gpt --data "$dir/text" --steps 40 --eval-every 20 --layers 1 --heads 2 --dim 32 --context 32 --batch 8 \
  --checkpoint "$dir/gpt.safetensors" --json "$dir/gpt.json" | tee "$dir/train.log"
grep -q "result: gpt on cpu:0, validation loss" "$dir/train.log"
for backend in cpu "$@"; do
  "$tessera" generate --checkpoint "$dir/gpt.safetensors" --prompt "the " --tokens 80 --seed 2 --backend "$backend" --compare \
    > "$dir/gen.$backend" 2> /dev/null
  grep -q "compare: identical with and without the kv cache (84 of 84 tokens agree)" "$dir/gen.$backend"
  head -c 4 "$dir/gen.$backend" | grep -q "the "
done
"$tessera" train --model lstm --data "$dir/text" --steps 10 --eval-every 10 --layers 1 --dim 32 --context 16 --batch 4 \
  --checkpoint "$dir/lstm.safetensors" | grep -q "result: lstm on cpu:0"
"$tessera" generate --checkpoint "$dir/lstm.safetensors" --prompt "the" --tokens 30 --compare 2> /dev/null | grep -q "compare: identical"

expect_error() {  # expect_error PATTERN CMD...
  local pattern=$1
  shift
  if "$@" > "$dir/out" 2>&1; then echo "expected a failure: $*"; exit 1; fi
  grep -q -- "$pattern" "$dir/out" || { echo "expected '$pattern' from $*, got:"; cat "$dir/out"; exit 1; }
}
expect_error "text data: '/nonexistent' does not exist" "$tessera" train --model gpt --data /nonexistent
: > "$dir/empty"
expect_error "too little to train on" "$tessera" train --model gpt --data "$dir/empty"
head -c 4096 /dev/urandom > "$dir/binary"
expect_error "binary" "$tessera" train --model gpt --data "$dir/binary"
expect_error "must be divisible by --heads" "$tessera" train --model gpt --data "$dir/text" --dim 30 --heads 4
expect_error "is not a language-model checkpoint\|is not a Tessera\|safetensors" "$tessera" generate --checkpoint "$dir/text"
expect_error "is not in the model's vocabulary" "$tessera" generate --checkpoint "$dir/gpt.safetensors" --prompt "ZZZ"
# Mixed precision on the language models (autocast; the residual stream stays f32).
for model in gpt lstm; do
  "$tessera" train --model $model --precision bf16 --data "$dir/text" --steps 6 --eval-every 6 --layers 1 --dim 32 --context 16 --batch 4 \
    | grep -q "result: $model on cpu:0, validation loss"
done
# Outputs never overwrite the text, a FIFO is refused (not read forever), a diverged run
# leaves the last good checkpoint alone, and a checkpoint's config is checked before building.
expect_error "is the input data file" "$tessera" train --model gpt --data "$dir/text" --steps 2 --metrics "$dir/text"
mkfifo "$dir/fifo"
expect_error "is not a regular file" timeout 60 "$tessera" train --model gpt --data "$dir/fifo"
cp "$dir/gpt.safetensors" "$dir/good.safetensors"
expect_error "weights became non-finite" "$tessera" train --model gpt --data "$dir/text" --steps 1 --eval-every 1 --layers 1 --heads 2 \
  --dim 32 --context 32 --batch 8 --lr 1e300 --checkpoint "$dir/gpt.safetensors"
cmp -s "$dir/gpt.safetensors" "$dir/good.safetensors" || { echo "a diverged run replaced the checkpoint"; exit 1; }
/usr/bin/python3 - "$dir/gpt.safetensors" "$dir/huge.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
cfg = json.loads(header["__metadata__"]["model_config"])
cfg["layers"] = 1000000
header["__metadata__"]["model_config"] = json.dumps(cfg)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
expect_error "model_config layers 1000000" timeout 60 "$tessera" generate --checkpoint "$dir/huge.safetensors" --tokens 4
# A flag the model family does not use is refused when the flags are parsed, never ignored.
expect_error "--epochs does not apply to --model gpt" "$tessera" train --model gpt --data "$dir/text" --epochs 2
expect_error "--on-nonfinite skip does not apply to --model lstm" "$tessera" train --model lstm --data "$dir/text" --on-nonfinite skip
expect_error "--steps does not apply to --model mlp" "$tessera" train --model mlp --steps 5
expect_error "--dropout does not apply to --model lstm" "$tessera" train --model lstm --data "$dir/text" --dropout 0.1
echo "lm cli: ok"
