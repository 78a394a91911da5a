#!/usr/bin/env bash
# Checkpoints of `tessera train --model gpt` split across ranks hold the whole GPT and its
# per-parameter Adam state, so a run resumes under any layout: 10 steps as pipeline 2 x tensor
# parallel 2 on 4 ranks, then 10 more in one process and as tensor parallel 2 on 2 ranks; 10 steps
# in one process, then 10 more as a 2-stage pipeline over 2 ranks; 10 steps of a 4-block GPT as an
# interleaved pipeline (2 stages x 2 chunks), then 10 more in one process. Each resumed run follows the
# unbroken single-process run within 1e-4 at every step. The split run's file also resumes fully
# sharded (ZeRO-3), and as a 2-stage pipeline sharded over 2 replicas (--pipeline 2 --zero 3 on 4
# ranks), as it resumes under DDP (the plain loader), `tessera generate` reads it, and
# --export of a tensor-parallel run writes the whole GPT.
#   checkpoint_model_parallel.sh <mpiexec> <tessera> <work dir>
set -euo pipefail
mpiexec=$1 tessera=$2 work=$3
mkdir -p "$work"
dir=$(mktemp -d "$work/dist_mp_ckpt.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for i in $(seq 400); do echo "the quick brown fox jumps over the lazy dog $((i % 7)). pack my box with five dozen jugs."; done > "$dir/text"
# --schedule none: the learning rate does not depend on --steps, so a 10-step run is the first
# half of a 20-step one. --clip 1 clips the first steps.
common=(train --model gpt --data "$dir/text" --eval-every 10 --layers 2 --heads 2 --dim 32 --context 32 --lr 3e-3 --threads 1
        --batch-size 8 --schedule none --warmup 0 --clip 1)
run() {  # run NAME [mpiexec -n N] ARGS...: the log and JSON report as NAME
  local name=$1
  shift
  "$@" --json "$dir/$name.json" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
}
run single "$tessera" "${common[@]}" --steps 20
run pp-tp "$mpiexec" -n 4 "$tessera" "${common[@]}" --steps 10 --pipeline 2 --tensor-parallel 2 --micro-batches 2 \
  --checkpoint "$dir/split.safetensors"
for copy in one tp ddp zero ppzero; do cp "$dir/split.safetensors" "$dir/$copy.safetensors"; done
run resumed-one "$tessera" "${common[@]}" --steps 20 --checkpoint "$dir/one.safetensors" --resume
run resumed-tp "$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 20 --tensor-parallel 2 --checkpoint "$dir/tp.safetensors" --resume
run resumed-ddp "$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 20 --distributed --checkpoint "$dir/ddp.safetensors" --resume
run resumed-zero "$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 20 --zero 3 --checkpoint "$dir/zero.safetensors" --resume
run resumed-ppzero "$mpiexec" -n 4 "$tessera" "${common[@]}" --steps 20 --pipeline 2 --micro-batches 2 --zero 3 \
  --checkpoint "$dir/ppzero.safetensors" --resume
run half "$tessera" "${common[@]}" --steps 10 --checkpoint "$dir/whole.safetensors"
run resumed-pp "$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 20 --pipeline 2 --micro-batches 2 --checkpoint "$dir/whole.safetensors" \
  --resume
# An interleaved pipeline's checkpoint (chunks named by index on each rank) resumes in one process.
deep=()  # common with --layers 4 (CLI11 takes a flag once)
prev=""
for w in "${common[@]}"; do [[ $prev == --layers ]] && deep+=(4) || deep+=("$w"); prev=$w; done
run single4 "$tessera" "${deep[@]}" --steps 20
run int-half "$mpiexec" -n 2 "$tessera" "${deep[@]}" --steps 10 --pipeline 2 --pipeline-schedule interleaved --micro-batches 2 \
  --checkpoint "$dir/int.safetensors"
run int-resumed-one "$tessera" "${deep[@]}" --steps 20 --checkpoint "$dir/int.safetensors" --resume
cat "$dir/pp-tp.log" "$dir/resumed-tp.log"
"$tessera" generate --checkpoint "$dir/split.safetensors" --prompt "the " --tokens 20 --compare 2> /dev/null | grep -q "compare: identical"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = {n: json.load(open(f"{d}/{n}.json")) for n in ("single", "pp-tp", "resumed-one", "resumed-tp", "resumed-ddp", "resumed-zero",
                                                   "resumed-ppzero", "half", "resumed-pp", "single4", "int-half", "int-resumed-one")}
def worst(name, ref, first, count):
    got, want = r[name]["step_losses"], r[ref]["step_losses"][first:first + count]
    assert len(got) == count == len(want), f"{name}: {len(got)} steps, expected {count}"
    return max(abs(x - y) / y for x, y in zip(got, want))
checks = (("pp-tp", "single", 0), ("resumed-one", "single", 10), ("resumed-tp", "single", 10), ("resumed-pp", "single", 10),
          ("resumed-zero", "resumed-ddp", 0), ("resumed-ppzero", "resumed-ddp", 0), ("int-half", "single4", 0),
          ("int-resumed-one", "single4", 10))
for name, ref, first in checks:
    w = worst(name, ref, first, 10)
    print(f"{name:12s} vs {ref:11s} steps {first + 1}-{first + 10}: worst relative step-loss difference {w:.2e}; "
          f"val loss {r[name]['val_loss']:.4f}")
    assert w <= 1e-4, f"{name} does not follow {ref}"
for name in ("resumed-one", "resumed-tp", "resumed-pp"):
    assert abs(r[name]["val_loss"] - r["single"]["val_loss"]) <= 1e-4 * r["single"]["val_loss"], f"{name}'s validation loss is not single's"
for name in ("resumed-zero", "resumed-ppzero"):
    assert abs(r[name]["val_loss"] - r["resumed-ddp"]["val_loss"]) <= 1e-4 * r["resumed-ddp"]["val_loss"], f"{name}'s validation loss"
assert r["resumed-ppzero"]["layout"] == {"pipeline": 2, "tensor_parallel": 1, "data_parallel": 2, "zero": 3}
assert r["single"]["step_losses"][0] - r["single"]["val_loss"] > 0.5, "the single-process run did not learn"
PY
info=$("$tessera" info 2> /dev/null)  # whole, then searched: grep -q on the pipe would end it early (SIGPIPE under pipefail)
if grep -q "^ONNX: import" <<< "$info"; then
  "$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 4 --tensor-parallel 2 --export "$dir/split.onnx" > "$dir/export.log" 2>&1 ||
    { cat "$dir/export.log"; echo "FAIL: --export of a tensor-parallel run"; exit 1; }
  grep "export" "$dir/export.log"
fi
echo "dist model-parallel checkpoints: ok"
