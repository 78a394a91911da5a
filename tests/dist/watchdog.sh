#!/usr/bin/env bash
# The watchdog: rank 1 of 2 never joins an all-reduce (mode hang: it sleeps 60 s; mode die: it
# exits). Rank 0's collective has a 2 s deadline; the job must end non-zero well before rank
# 1's sleep would, with rank 0 naming its collective and shape: the watchdog's timeout report
# (hang), or its report on the launcher's SIGTERM (die: mpirun ends the job first).
# p2p-unbatched: under TESSERA_P2P_STREAM_ORDER=1 (NCCL's stream order for point-to-point), two
# ranks' crossed transfers complete batched, and issued one by one (send first on both sides)
# they deadlock as they would on NCCL: the watchdog names the send.
#   watchdog.sh <mpiexec> <dist_test> hang|die|pipeline-die|p2p-unbatched
set -uo pipefail
mpiexec=$1 bin=$2 mode=$3
start=$(date +%s)
if [[ $mode == p2p-unbatched ]]; then export TESSERA_P2P_STREAM_ORDER=1; fi
out=$(timeout 120 "$mpiexec" -n 2 "$bin" "$mode" cpu 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "watchdog.sh: mode $mode exit $rc after ${elapsed}s"
if [[ $rc -eq 0 ]]; then echo "FAIL: the job succeeded without its peer"; exit 1; fi
if [[ $rc -eq 124 ]]; then echo "FAIL: the job hung (killed by timeout)"; exit 1; fi
if (( elapsed > 45 )); then echo "FAIL: took ${elapsed}s, the deadline is 2s"; exit 1; fi
if [[ $mode == hang ]] && ! grep -q "tessera dist watchdog: rank 0 of 2: all_reduce #1 of float32 \[4, 4\] did not complete within 2.0 s" <<<"$out"; then
  echo "FAIL: no watchdog report"; exit 1
fi
# A dead peer: mpirun terminates the survivor, which says what it was waiting in.
if [[ $mode == die ]] && ! grep -q "tessera dist watchdog: rank 0 of 2: all_reduce #1 of float32 \[4, 4\] was interrupted" <<<"$out"; then
  echo "FAIL: the surviving rank did not report its collective"; exit 1
fi
# A pipeline whose next stage died: stage 0 names the receive it was waiting in.
if [[ $mode == pipeline-die ]] && ! grep -Eq "tessera dist watchdog: rank 0 of 2: recv from rank 1 \(tag 2\) #[0-9]+ of float32 \[2, 4\] (was interrupted|did not complete)" <<<"$out"; then
  echo "FAIL: the surviving stage did not name its recv"; exit 1
fi
if [[ $mode == p2p-unbatched ]]; then
  [[ $(grep -c "batched crossed transfers: ok" <<<"$out") -eq 2 ]] || { echo "FAIL: the batched transfers did not complete on both ranks"; exit 1; }
  grep -Eq "tessera dist watchdog: rank [01] of 2: send to rank [01] \(tag 5\) #[0-9]+ of float32 \[2, 4\] (did not complete|was interrupted)" <<<"$out" ||
    { echo "FAIL: no rank named the send it was stuck in"; exit 1; }
fi
echo "PASS"
