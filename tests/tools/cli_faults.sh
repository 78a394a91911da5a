#!/usr/bin/env bash
# Fault tests of `tessera train` as a user (and an attacker) would run it.
#   cli_faults.sh TESSERA DATA_DIR WORK_DIR validation|resume|nonfinite|kill|disk
# Exit 0 = pass, 77 = skipped (with the reason printed), anything else = fail.
set -uo pipefail
tessera=$1 data=$2 work=$3 mode=$4
dir="$work/cli_faults_$mode"
rm -rf "$dir" && mkdir -p "$dir"
base=(--limit 512 --test-limit 200 --batch-size 64 --quiet)
small=("${base[@]}" --model mlp --data "$data")
fail() { echo "FAIL: $*"; exit 1; }

# expect_error "<regex>" args...: the command must exit non-zero, print the message, and not crash.
expect_error() {
  local want=$1; shift
  local out rc
  out=$("$tessera" "$@" 2>&1); rc=$?
  [[ $rc -ne 0 && $rc -lt 128 ]] || fail "exit $rc (want an error) for: $* :: $out"
  [[ $out =~ $want ]] || fail "message '$out' does not match '$want' for: $*"
  echo "ok: $* -> ${out%%$'\n'*}"
}

case $mode in
validation)
  for bad in "--lr nan" "--lr inf" "--lr -1" "--lr 0" "--weight-decay nan" "--weight-decay -0.1" "--seed -1" \
             "--batch-size 9223372036854775000" "--batch-size 0" "--epochs 0" "--epochs 9223372036854775807" \
             "--limit -5" "--threads -1" "--workers 1000" "--lr 1e" "--epochs 3x"; do
    # shellcheck disable=SC2086
    expect_error "" train "${small[@]}" $bad
  done
  expect_error "--checkpoint and --json name the same file" train "${small[@]}" --checkpoint "$dir/x" --json "$dir/x"
  expect_error "--json '/nonexistent/dir/out.json': directory '/nonexistent/dir' does not exist" \
    train "${small[@]}" --json /nonexistent/dir/out.json
  mkdir -p "$dir/adir"
  expect_error "exists and is not a regular file" train "${small[@]}" --checkpoint "$dir/adir"
  expect_error "is the input data file" train "${small[@]}" --json "$data/train-labels-idx1-ubyte.gz"
  expect_error "--resume needs --checkpoint" train "${small[@]}" --resume
  expect_error "--reset-optimizer needs --resume" train "${small[@]}" --reset-optimizer
  mkfifo "$dir/fifo"
  mkdir -p "$dir/fifo_data" && mkfifo "$dir/fifo_data/train-images-idx3-ubyte"
  expect_error "is not a regular file" train "${base[@]}" --data "$dir/fifo_data"
  ;;
resume)
  ck="$dir/run.safetensors"
  "$tessera" train "${small[@]}" --epochs 1 --optimizer adam --lr 0.002 --checkpoint "$ck" || fail "first run"
  expect_error "--optimizer sgd differs from the checkpoint's \"adam\".*--reset-optimizer" \
    train "${small[@]}" --epochs 2 --optimizer sgd --checkpoint "$ck" --resume
  expect_error "--model cnn does not match the checkpoint's \"mlp\"" train "${base[@]}" --data "$data" --model cnn --epochs 2 \
    --checkpoint "$ck" --resume
  out=$("$tessera" train --limit 512 --test-limit 200 --batch-size 64 --quiet --data "$data" --epochs 2 \
        --lr 0.01 --checkpoint "$ck" --resume 2>&1) || fail "resume with --lr: $out"
  [[ $out == *"resume: --lr 0.01 replaces the checkpoint's 0.002"* ]] || fail "explicit --lr not reported: $out"
  [[ $out == *"resume: --model \"mlp\" (from the checkpoint)"* ]] || fail "checkpoint's model not adopted: $out"
  cp "$ck" "$dir/before_reset"
  out=$("$tessera" train "${small[@]}" --epochs 3 --optimizer sgd --reset-optimizer --checkpoint "$ck" --resume 2>&1) \
    || fail "--reset-optimizer: $out"
  cmp -s "$ck" "$dir/before_reset" && fail "--reset-optimizer run did not continue training"
  echo "ok: resume settings reconciled and reported"
  ;;
nonfinite)
  ck="$dir/good.safetensors"
  "$tessera" train "${small[@]}" --epochs 1 --optimizer sgd --schedule none --checkpoint "$ck" || fail "good run"
  cp "$ck" "$dir/saved"
  expect_error "non-finite .* at step [0-9]+ \(epoch 2, batch [0-9]+\).*the last checkpoint '$ck' is kept" \
    train "${small[@]}" --epochs 3 --optimizer sgd --schedule none --lr 1e30 --checkpoint "$ck" --resume
  cmp -s "$ck" "$dir/saved" || fail "the good checkpoint was overwritten"
  expect_error "non-finite .* at step" train "${small[@]}" --epochs 2 --lr 1e30 --optimizer sgd --json "$dir/nan.json"
  [[ -e "$dir/nan.json" ]] && fail "a failed run wrote its JSON summary"
  # Skip mode survives a few poisoned steps (tests/nn/reliability_test.cpp), not a diverged run
  # whose steps are nearly all skipped: that fails, with no JSON summary claiming success.
  expect_error "optimizer steps of epoch 1 were skipped for non-finite values" \
    train "${small[@]}" --epochs 1 --lr 1e30 --optimizer sgd --on-nonfinite skip --json "$dir/skip.json"
  [[ -e "$dir/skip.json" ]] && fail "a diverged skip-mode run wrote its JSON summary"
  echo "ok: NaN stops the run and never reaches the checkpoint; a diverged skip-mode run fails"
  ;;
kill)
  # A run killed with SIGKILL at any point of a checkpoint write leaves the previous checkpoint
  # loadable; resuming ends byte-identical to an uninterrupted run, and no temp file survives.
  common=("${small[@]}" --epochs 3 --seed 4)
  "$tessera" train "${common[@]}" --checkpoint "$dir/straight.safetensors" || fail "straight run"
  trials=0 killed=0
  for trial in $(seq 1 24); do
    ck="$dir/t$trial.safetensors"
    if (( trial <= 20 )); then
      # Killed inside the write of checkpoint 1, 2 or 3, after a varying number of tensors.
      TESSERA_TEST_CRASH_IN_SAVE=$(( (trial - 1) % 3 + 1 )) TESSERA_TEST_CRASH_TENSOR=$(( trial % 7 )) \
        "$tessera" train "${common[@]}" --checkpoint "$ck" >/dev/null 2>&1 &
      wait $!
    else
      # Killed from outside at an arbitrary moment.
      timeout --foreground -s KILL "$(printf '0.%03d' $(( RANDOM % 400 + 40 )))" "$tessera" train "${common[@]}" --checkpoint "$ck" >/dev/null 2>&1
    fi
    rc=$?
    echo "trial $trial: exit $rc"
    trials=$((trials + 1))
    [[ $rc -eq 137 ]] && killed=$((killed + 1))
    (( trial <= 20 && rc != 137 )) && fail "trial $trial: the run was not killed (exit $rc)"
    "$tessera" train "${common[@]}" --checkpoint "$ck" --resume >/dev/null 2>&1 || fail "trial $trial: resume failed"
    cmp -s "$ck" "$dir/straight.safetensors" || fail "trial $trial: resumed checkpoint differs from the uninterrupted run"
    compgen -G "$ck.tmp.*" >/dev/null && fail "trial $trial: a stale temporary file survived the resumed run"
  done
  echo "ok: $trials trials, $killed killed with SIGKILL, every resume byte-identical, no temp files left"
  ;;
disk)
  if [[ $(id -u) -ne 0 ]]; then echo "SKIP: needs root to mount a small tmpfs"; exit 77; fi
  mnt="$dir/mnt"
  mkdir -p "$mnt"
  if ! mount -t tmpfs -o size=1m tmpfs "$mnt" 2>/dev/null; then echo "SKIP: mount -t tmpfs not permitted here"; exit 77; fi
  trap 'umount "$mnt" 2>/dev/null' EXIT
  # Full disk: the 2.8 MB checkpoint cannot fit in 1 MB; the run fails naming the file.
  expect_error "save_safetensors: writing '$mnt/ck.safetensors' failed: No space left on device" \
    train "${small[@]}" --epochs 1 --checkpoint "$mnt/ck.safetensors"
  compgen -G "$mnt/ck.safetensors*" >/dev/null && fail "a partial checkpoint or temp file is left on the full disk"
  # A --json write on a nearly full disk: fill it first, then the summary cannot be written.
  head -c 2000000 /dev/zero > "$mnt/filler" 2>/dev/null  # stops at ENOSPC: the disk is full
  expect_error "train --json: writing '$mnt/out.json' failed: No space left on device" \
    train "${small[@]}" --epochs 1 --json "$mnt/out.json"
  [[ -e "$mnt/out.json" ]] && fail "a 0-byte JSON file was left behind"
  rm -f "$mnt/filler"
  # Read-only target: refused before training starts.
  mount -o remount,ro "$mnt" || fail "remount read-only"
  expect_error "is not writable" train "${small[@]}" --epochs 1 --json "$mnt/out.json"
  umount "$mnt"; trap - EXIT
  echo "ok: full and read-only targets fail clearly and leave nothing behind"
  ;;
*) fail "unknown mode $mode" ;;
esac
