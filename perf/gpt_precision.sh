#!/usr/bin/env bash
# The default GPT run (`tessera train --model gpt`: fortunes, 2000 steps) at f32, bf16 and f16
# (autocast; f16 with loss scaling), one after another on the same machine, and the gaps of the
# mixed-precision validation losses to f32's (issue targets: bf16 within 0.03, f16 within 0.05
# nats/char). Writes <out>/gpt-<precision>.json and prints a table. ~10 minutes per run on 2 cores.
#   perf/gpt_precision.sh [tessera binary] [out dir] [extra train flags, e.g. --steps 500]
set -euo pipefail
tessera=${1:-build/release/tools/tessera}
out=${2:-build/gpt_precision}
shift $(( $# >= 2 ? 2 : $# ))
mkdir -p "$out"
for p in f32 bf16 f16; do
  "$tessera" train --model gpt --precision "$p" --json "$out/gpt-$p.json" "$@" | tail -n 3
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
runs = {p: json.load(open(f"{d}/gpt-{p}.json")) for p in ("f32", "bf16", "f16")}
base = runs["f32"]["val_loss"]
print(f"{'precision':>9} {'val loss':>9} {'gap to f32':>11} {'tokens/s':>9} {'seconds':>8}")
for p, r in runs.items():
    print(f"{p:>9} {r['val_loss']:9.4f} {r['val_loss'] - base:+11.4f} {r['tokens_per_second']:9.0f} {r['seconds']:8.1f}")
ok = runs["bf16"]["val_loss"] - base <= 0.03 and runs["f16"]["val_loss"] - base <= 0.05
print("targets (bf16 <= +0.03, f16 <= +0.05 nats/char):", "met" if ok else "MISSED")
PY
