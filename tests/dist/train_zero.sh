#!/usr/bin/env bash
# `tessera train --model gpt --zero 3` under mpirun: the fully sharded run follows the DDP run of
# the same flags (same windows per rank) within 1e-4 at every step; its checkpoint holds the
# gathered model, which `tessera generate` reads, and from which a DDP run resumes. A GPT whose
# parameters, gradients and Adam state exceed --memory-limit fails cleanly in one process (and
# under DDP) and trains fully sharded over two ranks.
#   train_zero.sh <mpiexec> <tessera> <work dir>
set -euo pipefail
mpiexec=$1 tessera=$2 work=$3
mkdir -p "$work"
dir=$(mktemp -d "$work/dist_zero.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for i in $(seq 400); do echo "the quick brown fox jumps over the lazy dog $((i % 7)). pack my box with five dozen jugs."; done > "$dir/text"
common=(train --model gpt --data "$dir/text" --eval-every 20 --layers 2 --heads 2 --dim 32 --context 32 --lr 3e-3 --threads 1
        --batch-size 16 --schedule none --warmup 0)
"$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 40 --distributed --json "$dir/ddp.json" > "$dir/ddp.log"
"$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 40 --zero 3 --checkpoint "$dir/zero.safetensors" --json "$dir/zero.json" > "$dir/zero.log"
"$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 20 --zero 3 --checkpoint "$dir/half.safetensors" > "$dir/half.log"
"$mpiexec" -n 2 "$tessera" "${common[@]}" --steps 40 --distributed --checkpoint "$dir/half.safetensors" --resume --json "$dir/resumed.json" > "$dir/resumed.log" 2>&1
cat "$dir/ddp.log" "$dir/zero.log" "$dir/resumed.log"
grep -q "fully sharded (ZeRO-3): 2 ranks over mpi, batch 8 per rank; 2 units gathered one at a time" "$dir/zero.log"
[[ $(grep -c "^result:" "$dir/zero.log") -eq 1 ]] || { echo "FAIL: expected one result line (rank 0)"; exit 1; }
"$tessera" generate --checkpoint "$dir/zero.safetensors" --prompt "the " --tokens 20 --compare 2> /dev/null | grep -q "compare: identical"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
ddp, zero, resumed = (json.load(open(f"{d}/{n}.json")) for n in ("ddp", "zero", "resumed"))
worst = max(abs(a - b) / a for a, b in zip(ddp["step_losses"], zero["step_losses"]))
print(f"ZeRO-3 vs DDP, 40 steps: worst relative step-loss difference {worst:.2e}; val loss {ddp['val_loss']:.4f} vs {zero['val_loss']:.4f}; "
      f"resumed from the step-20 ZeRO-3 checkpoint under DDP: {resumed['val_loss']:.4f}")
assert len(zero["step_losses"]) == 40 == len(ddp["step_losses"])
assert ddp["step_losses"][0] - zero["val_loss"] > 0.5, "the sharded run did not learn"
assert worst <= 1e-4, "the ZeRO-3 run does not follow the DDP run"
assert len(resumed["step_losses"]) == 20, "the resumed run did not continue from step 20"
assert abs(resumed["val_loss"] - zero["val_loss"]) <= 1e-4 * zero["val_loss"], "the DDP run resumed from the sharded checkpoint does not continue the sharded run"
PY
big=(train --model gpt --data "$dir/text" --steps 4 --eval-every 4 --layers 8 --heads 4 --dim 96 --context 16 --batch-size 4 --threads 1
     --memory-limit 14M)
if "$tessera" "${big[@]}" > "$dir/big1.log" 2>&1; then echo "FAIL: the 900k-parameter GPT fit in 14 MiB on one device"; exit 1; fi
grep -q "cannot allocate .* within its limit" "$dir/big1.log" || { cat "$dir/big1.log"; echo "FAIL: no clear out-of-memory error"; exit 1; }
if "$mpiexec" -n 2 "$tessera" "${big[@]}" --distributed > "$dir/bigddp.log" 2>&1; then echo "FAIL: it fit under DDP"; exit 1; fi
"$mpiexec" -n 2 "$tessera" "${big[@]}" --zero 3 > "$dir/bigzero.log"
grep "^result:" "$dir/bigzero.log"
echo "a GPT over --memory-limit 14M: fails on one device and under DDP, trains with --zero 3 on two ranks"
echo "dist zero: ok"
