#!/usr/bin/env bash
# `tessera train --model gpt|lstm` and `tessera generate` end to end on a small text: a short
# run checkpoints, generate continues the prompt identically with and without the KV cache (on
# the CPU and on every other backend given), and bad data or a flag the model does not use is a
# one-line error.
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
# The reliability cases (outputs over the text, FIFOs, diverging runs, hostile checkpoints): lm_faults.sh.
# A flag the model family does not use is refused when the flags are parsed, never ignored.
expect_error "--epochs does not apply to --model gpt" "$tessera" train --model gpt --data "$dir/text" --epochs 2
expect_error "--graph with --dropout" "$tessera" train --model gpt --data "$dir/text" --graph --dropout 0.1
expect_error "--steps does not apply to --model mlp" "$tessera" train --model mlp --steps 5
expect_error "--dropout does not apply to --model lstm" "$tessera" train --model lstm --data "$dir/text" --dropout 0.1
echo "lm cli: ok"
