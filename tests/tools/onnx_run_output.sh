#!/usr/bin/env bash
# `tessera onnx run --output DIR --compare REF.pb`: outputs written at full precision read back
# bit-identical (.pb through Tessera's own reader with zero tolerance, .npy through numpy when
# it is installed), a wrong reference fails the run, and a FIFO as the model is refused at once.
#   onnx_run_output.sh TESSERA CASE_DIR (an ONNX node-suite case, e.g. test_add)
set -euo pipefail
tessera=$1 case=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
inputs=()
for f in "$case"/test_data_set_0/input_*.pb; do inputs+=(--input "$f"); done
ref=$case/test_data_set_0/output_0.pb

"$tessera" onnx run "$case/model.onnx" "${inputs[@]}" --output "$work/out" --compare "$ref" | tee "$work/log"
grep -q "matches, max abs error" "$work/log"
[[ -f $work/out/output_0.pb && -f $work/out/output_0.npy ]]
# What was written is what was computed: compared with zero tolerance against itself re-run.
"$tessera" onnx run "$case/model.onnx" "${inputs[@]}" --compare "$work/out/output_0.pb" --rtol 0 --atol 0 | grep -q "matches, max abs error 0,"
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  # The .npy holds the same bytes as the TensorProto's raw_data (its last field).
  /usr/bin/python3 - "$work/out/output_0.npy" "$work/out/output_0.pb" <<'PY'
import sys, numpy
a = numpy.load(sys.argv[1])
pb = open(sys.argv[2], "rb").read()
assert a.dtype == numpy.float32 and a.size > 0, (a.dtype, a.shape)
assert pb.endswith(a.tobytes()), "npy data differs from the TensorProto's raw data"
print("npy: numpy reads", a.shape, a.dtype, "bit-identical to output_0.pb")
PY
fi
# A reference that differs fails the run and says by how much.
if "$tessera" onnx run "$case/model.onnx" "${inputs[@]}" --compare "$case/test_data_set_0/input_0.pb" > "$work/bad" 2>&1; then
  echo "a differing reference passed"; cat "$work/bad"; exit 1
fi
grep -q "DIFFERS" "$work/bad"
grep -q "outputs differ from the --compare references" "$work/bad"
# A FIFO is refused at once (it used to block forever).
mkfifo "$work/fifo"
if timeout 20 "$tessera" onnx run "$work/fifo" > "$work/fifo.log" 2>&1; then echo "a FIFO model loaded"; exit 1; fi
grep -q "is not a regular file (a FIFO): refused" "$work/fifo.log"
echo "onnx run output: ok"
