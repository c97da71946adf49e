#!/usr/bin/env bash
# optcast-bench coll as the side-by-side script runs it (benchmarks/side_by_side.sh): on
# three local ranks over TCP, every collective at sizes that do not divide evenly into
# blocks or floats, every timing mode (loop: calls back to back, each call's results the
# same), through run() and through async_run (--api asio). Each (op, size) must give one line in the peer
# benchmarks' format with its results checked on every rank ("ok"); a forced algorithm
# must be refused where its collective lacks it.
set -euo pipefail
bench=$1
ops=bcast,scatter,gather,reduce,allreduce,allgather,alltoall
sizes=8,1000,65539
# Every timing through run(); sync once more through the completion-token API.
for mode in "sync task" "local task" "loop task" "sync asio"; do
  read -r timing api <<<"$mode"
  calls=()
  [ "$timing" = loop ] && calls=(-K 3)
  out=$("$bench" coll --np 3 -o "$ops" -l "$sizes" -t 0 -m 2 -r 2 -T "$timing" "${calls[@]}" --api "$api" -L t)
  grep -q "api=$api" <<<"$out" || { echo "the header does not name --api $api:"; echo "$out"; exit 1; }
  if [ "$timing" = loop ]; then
    grep -q "^# loop: K=3 calls per rep" <<<"$out" || { echo "the header does not say K=3:"; echo "$out"; exit 1; }
  fi
  lines=$(grep -v '^#' <<<"$out")
  n=$(wc -l <<<"$lines")
  [ "$n" = 21 ] || { echo "timing $timing: expected 21 result lines, got $n:"; echo "$out"; exit 1; }
  bad=$(awk 'NF != 8 || $1 != "t" || $4 != 2 || $8 != "ok" || !($5 > 0 && $5 <= $6 && $6 <= $7)' <<<"$lines")
  [ -z "$bad" ] || { echo "timing $timing: lines out of format or not ok:"; echo "$bad"; exit 1; }
  for op in ${ops//,/ }; do
    for m in ${sizes//,/ }; do
      grep -q "^t $op $m " <<<"$lines" || { echo "timing $timing: no line for $op $m"; exit 1; }
    done
  done
done
# Forced algorithms: one that bcast has runs; one reduce lacks is refused before any rank starts.
out=$("$bench" coll --np 3 -o bcast,reduce -l 4096 -t 0 -m 1 -r 1 --alg fibonacci)
grep -q '^# bcast 4096: fibonacci' <<<"$out" || { echo "--alg fibonacci did not run fibonacci:"; echo "$out"; exit 1; }
if "$bench" coll --np 3 -o reduce -l 4096 --alg reduce=fibonacci 2>/dev/null; then
  echo "--alg reduce=fibonacci was accepted"; exit 1
fi
# --calls belongs to the loop timing: refused with any other.
if err=$("$bench" coll --np 3 --calls 5 2>&1); then echo "--calls without --timing loop was accepted"; exit 1; fi
grep -q "goes with --timing loop" <<<"$err" || { echo "--calls refused without its reason: $err"; exit 1; }
echo "optcast-bench coll: every collective checked on every rank, in the peers' format"
