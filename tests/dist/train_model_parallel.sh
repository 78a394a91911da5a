#!/usr/bin/env bash
# `tessera train --model gpt` split across ranks: --pipeline 2 (in one process, and one stage
# per rank under mpirun), --tensor-parallel 2, pipeline 2 x tensor parallel 2 on 4 ranks, and
# pipeline 2 x data parallel 2 on 4 ranks, and each rank's part fully sharded over 2 replicas
# (--zero 3 with --pipeline 2 and --tensor-parallel 2 on 4 ranks, with both on 8), and the
# interleaved schedule (2 chunks a stage, alone and with both on 8), each following its
# reference run (the single process, or DDP over the same replicas' windows) within 1e-4 at every step, clipping included (--clip 1
# clips the first steps: the whole model's norm is summed over stages and shards, each weight
# once). 3 ranks for pipeline 2 x tensor parallel 2 are refused with the reason. A GPT whose
# parameters, gradients and Adam state exceed --memory-limit fails in one process and trains
# as a 2-stage pipeline over two ranks.
#   train_model_parallel.sh <mpiexec> <tessera> <work dir>
set -euo pipefail
mpiexec=$1 tessera=$2 work=$3
mkdir -p "$work"
dir=$(mktemp -d "$work/dist_mp.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for i in $(seq 400); do echo "the quick brown fox jumps over the lazy dog $((i % 7)). pack my box with five dozen jugs."; done > "$dir/text"
common=(train --model gpt --data "$dir/text" --steps 30 --eval-every 15 --layers 2 --heads 2 --dim 32 --context 32 --lr 3e-3
        --threads 1 --batch-size 8 --warmup 5)
run() {  # run NAME [mpiexec -n N] ARGS...: the log and JSON report as NAME
  local name=$1
  shift
  "$@" --json "$dir/$name.json" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAIL: $name"; exit 1; }
}
run single "$tessera" "${common[@]}"
run pp-local "$tessera" "${common[@]}" --pipeline 2 --micro-batches 4
run pp "$mpiexec" -n 2 "$tessera" "${common[@]}" --pipeline 2 --micro-batches 4 --pipeline-schedule gpipe
run tp "$mpiexec" -n 2 "$tessera" "${common[@]}" --tensor-parallel 2
run pp-tp "$mpiexec" -n 4 "$tessera" "${common[@]}" --pipeline 2 --tensor-parallel 2 --micro-batches 4
run ddp "$mpiexec" -n 2 "$tessera" "${common[@]}" --distributed
run pp-dp "$mpiexec" -n 4 "$tessera" "${common[@]}" --pipeline 2 --micro-batches 2
run pp-zero "$mpiexec" -n 4 "$tessera" "${common[@]}" --pipeline 2 --micro-batches 2 --zero 3
run pp-zero-kept "$mpiexec" -n 4 "$tessera" "${common[@]}" --pipeline 2 --micro-batches 4 --zero 3 --zero-keep-gathered
run tp-zero "$mpiexec" -n 4 "$tessera" "${common[@]}" --tensor-parallel 2 --zero 3
run pp-tp-zero "$mpiexec" -n 8 "$tessera" "${common[@]}" --pipeline 2 --tensor-parallel 2 --micro-batches 2 --zero 3
# The interleaved schedule: 4 blocks as 2 stages x 2 chunks (virtual stages 0, 2 on rank 0; 1, 3 on rank 1).
deep=()  # common with --layers 4 (CLI11 takes a flag once)
prev=""
for w in "${common[@]}"; do [[ $prev == --layers ]] && deep+=(4) || deep+=("$w"); prev=$w; done
run single4 "$tessera" "${deep[@]}"
run ddp4 "$mpiexec" -n 2 "$tessera" "${deep[@]}" --distributed
run pp-int "$mpiexec" -n 2 "$tessera" "${deep[@]}" --pipeline 2 --pipeline-schedule interleaved --micro-batches 4
run pp-int-tp-zero "$mpiexec" -n 8 "$tessera" "${deep[@]}" --pipeline 2 --pipeline-schedule interleaved --micro-batches 2 \
  --tensor-parallel 2 --zero 3
cat "$dir/pp-tp.log" "$dir/pp-dp.log" "$dir/pp-tp-zero.log"
grep -q "fully sharded (ZeRO-3) over the 2 data-parallel replicas" "$dir/pp-tp-zero.log"
grep -q "layout: 4 ranks = pipeline 2 x tensor parallel 2 x data parallel 1" "$dir/pp-tp.log"
grep -q "stage 1, replica 0: ranks 2, 3" "$dir/pp-tp.log"
grep -q "pipeline: 2 stages x 4 micro-batches (1f1b): bubble fraction 0.2 " "$dir/pp-tp.log"
grep -q "data parallel: the 2 replicas' parameters bitwise equal" "$dir/pp-dp.log"
[[ $(grep -c "^result:" "$dir/pp-tp.log") -eq 1 ]] || { echo "FAIL: expected one result line (rank 0)"; exit 1; }
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = {n: json.load(open(f"{d}/{n}.json")) for n in ("single", "pp-local", "pp", "tp", "pp-tp", "ddp", "pp-dp", "pp-zero", "pp-zero-kept", "tp-zero",
                                                   "pp-tp-zero", "single4", "ddp4", "pp-int", "pp-int-tp-zero")}
def worst(a, b):
    assert len(r[a]["step_losses"]) == len(r[b]["step_losses"]) == 30
    return max(abs(x - y) / x for x, y in zip(r[a]["step_losses"], r[b]["step_losses"]))
for name, ref in (("pp-local", "single"), ("pp", "single"), ("tp", "single"), ("pp-tp", "single"), ("pp-dp", "ddp"), ("pp-zero", "ddp"), ("pp-zero-kept", "ddp"),
                  ("tp-zero", "ddp"), ("pp-tp-zero", "ddp"), ("pp-int", "single4"), ("pp-int-tp-zero", "ddp4")):
    w = worst(name, ref)
    print(f"{name:14s} vs {ref:7s}: worst relative step-loss difference over 30 steps {w:.2e}; val loss {r[name]['val_loss']:.4f} vs {r[ref]['val_loss']:.4f}")
    assert w <= 1e-4, f"{name} does not follow {ref}"
    assert abs(r[name]["val_loss"] - r[ref]["val_loss"]) <= 1e-4 * r[ref]["val_loss"], f"{name}'s validation loss is not {ref}'s"
assert r["single"]["step_losses"][0] - r["single"]["val_loss"] > 0.5, "the single-process run did not learn"
assert r["pp-tp"]["layout"] == {"pipeline": 2, "tensor_parallel": 2, "data_parallel": 1, "zero": 0}
assert r["pp-tp-zero"]["layout"] == {"pipeline": 2, "tensor_parallel": 2, "data_parallel": 2, "zero": 3}
assert r["pp"]["pipeline"]["schedule"] == "gpipe" and abs(r["pp"]["pipeline"]["bubble_fraction"] - 0.2) < 1e-9
p = r["pp-int"]["pipeline"]  # 2 stages x 2 chunks, 4 micro-batches: 1F1B's bubble 1/5, interleaved 1/9
assert p["schedule"] == "interleaved" and p["chunks"] == 2 and abs(p["bubble_fraction"] - 1 / 9) < 1e-9, p
PY
if "$mpiexec" -n 3 "$tessera" "${common[@]}" --pipeline 2 --tensor-parallel 2 > "$dir/three.log" 2>&1; then
  echo "FAIL: 3 ranks ran pipeline 2 x tensor parallel 2"; exit 1
fi
grep -q "3 ranks do not lay out as pipeline 2 x tensor parallel 2: each model replica takes 4 ranks" "$dir/three.log" ||
  { cat "$dir/three.log"; echo "FAIL: no reason given for 3 ranks"; exit 1; }
if "$mpiexec" -n 4 "$tessera" "${common[@]}" --pipeline 2 --tensor-parallel 2 --zero 3 > "$dir/one-replica.log" 2>&1; then
  echo "FAIL: --zero 3 ran with one replica to shard over"; exit 1
fi
grep -q "4 ranks leave one: launch 8" "$dir/one-replica.log" || { cat "$dir/one-replica.log"; echo "FAIL: no reason given for --zero 3"; exit 1; }
big=(train --model gpt --data "$dir/text" --steps 4 --eval-every 4 --layers 8 --heads 4 --dim 96 --context 16 --batch-size 4 --threads 1
     --memory-limit 14M)
if "$tessera" "${big[@]}" > "$dir/big1.log" 2>&1; then echo "FAIL: the 900k-parameter GPT fit in 14 MiB on one device"; exit 1; fi
grep -q "cannot allocate .* within its limit" "$dir/big1.log" || { cat "$dir/big1.log"; echo "FAIL: no clear out-of-memory error"; exit 1; }
"$mpiexec" -n 2 "$tessera" "${big[@]}" --pipeline 2 --micro-batches 2 > "$dir/bigpp.log" 2>&1 || { cat "$dir/bigpp.log"; exit 1; }
grep "^result:" "$dir/bigpp.log"
echo "a GPT over --memory-limit 14M: fails on one device, trains with --pipeline 2 on two ranks"
echo "dist model parallel: ok"
