#!/usr/bin/env bash
# Fault tests of the language-model path of `tessera train` / `tessera generate`: every case ends
# in a one-line error with a non-zero exit, overwrites nothing, and never hangs.
#   lm_faults.sh TESSERA WORK_DIR
set -uo pipefail
tessera=$1 work=$2
dir=$(mktemp -d "$work/lm_faults.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_error() {  # expect_error PATTERN ARGS...: non-zero exit (no crash), the message, within 60 s
  local want=$1 out rc
  shift
  out=$(timeout 60 "$tessera" "$@" 2>&1); rc=$?
  [[ $rc -ne 0 && $rc -lt 124 ]] || fail "exit $rc (want an error) for: $* :: $out"
  grep -q -- "$want" <<< "$out" || fail "message '$out' does not match '$want' for: $*"
  echo "ok: ${*:1:3} ... -> ${out%%$'\n'*}"
}
for i in $(seq 300); do echo "the quick brown fox jumps over the lazy dog $((i % 7))."; done > "$dir/text"
model=(--model gpt --layers 1 --heads 2 --dim 16 --batch-size 4 --quiet)
tiny=("${model[@]}" --steps 2 --eval-every 2 --context 16)
sum_before=$(sha256sum < "$dir/text")

# No output may name the training text: each output flag in turn, and a file of a text directory.
for flag in --checkpoint --json --metrics --profile --export; do  # (a build without ONNX refuses --export first)
  expect_error "is the input data file\|has no ONNX support" train "${tiny[@]}" --data "$dir/text" "$flag" "$dir/text"
done
mkdir -p "$dir/corpus" && cp "$dir/text" "$dir/corpus/a"
expect_error "would be read as text data" train "${tiny[@]}" --data "$dir/corpus" --checkpoint "$dir/corpus/ckpt"
[[ $(sha256sum < "$dir/text") == "$sum_before" ]] || fail "the training text was modified"

# A FIFO as the text is refused, not read forever.
mkfifo "$dir/fifo"
expect_error "is not a regular file" train "${tiny[@]}" --data "$dir/fifo"

# A diverging run (learning rate 1e300) fails and leaves the last good checkpoint as it was.
"$tessera" train "${tiny[@]}" --data "$dir/text" --checkpoint "$dir/good.safetensors" > /dev/null || fail "the good run failed"
cp "$dir/good.safetensors" "$dir/keep.safetensors"
expect_error "the weights are not finite\\|non-finite loss" train "${tiny[@]}" --data "$dir/text" --lr 1e300 --checkpoint "$dir/good.safetensors"
cmp -s "$dir/good.safetensors" "$dir/keep.safetensors" || fail "a diverged run replaced the checkpoint"
"$tessera" generate --checkpoint "$dir/good.safetensors" --prompt "the " --tokens 8 > /dev/null 2>&1 || fail "the kept checkpoint does not generate"
# ... and with --on-nonfinite skip, a run that skips most of its steps fails too.
expect_error "were skipped for non-finite values\|the weights are not finite" train "${model[@]}" --data "$dir/text" --steps 4 --eval-every 4 \
  --context 16 --lr 1e300 --on-nonfinite skip --checkpoint "$dir/good.safetensors"
cmp -s "$dir/good.safetensors" "$dir/keep.safetensors" || fail "a run that skipped most steps replaced the checkpoint"

# A checkpoint whose config asks for a million layers is refused before anything is built.
/usr/bin/python3 - "$dir/good.safetensors" "$dir/huge.safetensors" <<'PY'
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
expect_error "model_config layers 1000000" generate --checkpoint "$dir/huge.safetensors" --tokens 4

# Out-of-range settings and a text too short to validate on are refused, not clamped.
expect_error "out of range" train "${tiny[@]}" --data "$dir/text" --seed 99999999999999999999999
head -c 400 "$dir/text" > "$dir/short"
expect_error "validation split" train "${model[@]}" --steps 2 --eval-every 2 --data "$dir/short" --context 64
# Split layouts that cannot run are refused with the reason (one process, no mpirun needed).
split=(--model gpt --heads 2 --dim 16 --quiet --steps 2 --eval-every 2 --context 16 --data "$dir/text")
expect_error "needs --pipeline-schedule interleaved" train "${split[@]}" --layers 2 --pipeline 2 --pipeline-chunks 2
expect_error "virtual stages need at least as many --layers, got 3" train "${split[@]}" --layers 3 --pipeline 2 \
  --pipeline-schedule interleaved
expect_error "3 micro-batches do not divide by it" train "${split[@]}" --layers 4 --pipeline 2 --pipeline-schedule interleaved \
  --micro-batches 3 --batch-size 6
# (a build without MPI refuses --zero 3 first, naming the missing process group)
expect_error "1 process leaves one: launch 4\|no process-group backend" train "${split[@]}" --layers 2 --pipeline 2 --zero 3
echo "lm faults: ok"
