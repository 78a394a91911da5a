#!/usr/bin/env bash
# ZeRO-1 checkpoints load into any world size: 4 steps on 3 ranks, the gathered state saved by
# rank 0, then 4 more steps on 2 ranks from it; the result must equal 8 single-process steps.
#   zero_resume.sh <mpiexec> <dist_test> <work dir> <device>
set -euo pipefail
mpiexec=$1 bin=$2 work=$3 dev=$4
mkdir -p "$work"
path="$work/zero-resume-$dev"
rm -f "$path.params" "$path.optim"
"$mpiexec" -n 3 "$bin" zero-save "$dev" "$path"
"$mpiexec" -n 2 "$bin" zero-load "$dev" "$path"
