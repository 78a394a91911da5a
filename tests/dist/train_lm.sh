#!/usr/bin/env bash
# `tessera train --model gpt --distributed` under mpirun on a small text: 2 ranks (each half of
# the global batch, its own windows, averaged gradients) reach the single-process validation
# loss; with --grad-accum (no_sync for all but the last micro-batch) too; only rank 0 reports
# and writes the checkpoint, which `tessera generate` reads.
#   train_lm.sh <mpiexec> <tessera> <work dir>
set -euo pipefail
mpiexec=$1 tessera=$2 work=$3
mkdir -p "$work"
dir=$(mktemp -d "$work/dist_lm.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for i in $(seq 400); do echo "the quick brown fox jumps over the lazy dog $((i % 7)). pack my box with five dozen jugs."; done > "$dir/text"
common=(train --model gpt --data "$dir/text" --steps 80 --eval-every 40 --layers 1 --heads 2 --dim 32 --context 32 --lr 3e-3 --threads 1)
"$tessera" "${common[@]}" --batch-size 16 --json "$dir/single.json" > "$dir/single.log"
"$mpiexec" -n 2 "$tessera" "${common[@]}" --distributed --batch-size 16 --checkpoint "$dir/dist.safetensors" --json "$dir/dist.json" > "$dir/dist.log"
"$mpiexec" -n 2 "$tessera" "${common[@]}" --distributed --batch-size 8 --grad-accum 2 --json "$dir/accum.json" > "$dir/accum.log"
cat "$dir/single.log" "$dir/dist.log" "$dir/accum.log"
grep -q "data parallel: 2 ranks over mpi, batch 8 per rank" "$dir/dist.log"
grep -q "data parallel: parameters bitwise equal on all 2 ranks" "$dir/accum.log"
[[ $(grep -c "^result:" "$dir/dist.log") -eq 1 ]] || { echo "FAIL: expected one result line (rank 0)"; exit 1; }
"$tessera" generate --checkpoint "$dir/dist.safetensors" --prompt "the " --tokens 20 --compare 2> /dev/null | grep -q "compare: identical"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
single, dist, accum = (json.load(open(f"{d}/{n}.json")) for n in ("single", "dist", "accum"))
a, b, c = single["val_loss"], dist["val_loss"], accum["val_loss"]
print(f"val loss: single {a:.4f}  2 ranks {b:.4f}  2 ranks x grad-accum 2 {c:.4f} (start ~{single['step_losses'][0]:.2f})")
assert single["step_losses"][0] - a > 1.0, "the single-process run did not learn"
assert abs(a - b) <= 0.05, "the 2-rank run's validation loss is not the single-process run's"
assert abs(a - c) <= 0.05, "the 2-rank run with gradient accumulation does not match"
PY
echo "dist lm: ok"
