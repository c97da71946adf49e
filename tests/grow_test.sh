#!/usr/bin/env bash
# Grow (optcast/survive.hpp), with real processes and a store apart: four ranks of
# examples/grow run allreduces; rank 2 is killed (SIGKILL); the survivors shrink to
# {0,1,3}; a replacement started as rank 2 with OPTCAST_REJOIN=1 joins through the store;
# the survivors grow and all four check an allreduce on {0,1,2,3} and end the job well
# (the store exits 0). Then the refusals: a process in a failed rank's slot without
# OPTCAST_REJOIN, and a replacement for a rank that did not fail.
#   tests/grow_test.sh OPTCAST_TOOL GROW
set -euo pipefail
tool=$1 grow=$2
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export OPTCAST_SECRET=grow-test-secret-0123456789abcdef OPTCAST_BOOTSTRAP_TIMEOUT=20

"$tool" store --np 4 --host 127.0.0.1 --port 0 --join-within 20 > "$work/store.out" 2> "$work/store.err" &
store_pid=$!
for _ in $(seq 200); do grep -q "serving" "$work/store.out" 2>/dev/null && break; sleep 0.05; done
port=$(sed -n 's/.* at 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/store.out")
[ -n "$port" ] || { echo "no port in: $(cat "$work/store.out" "$work/store.err")"; exit 1; }
rank() {  # R [ENV...]: one rank of the job, in the background; its pid in pid[R] (last start)
  local r=$1; shift
  env OPTCAST_RANK=$r OPTCAST_SIZE=4 OPTCAST_STORE=127.0.0.1:$port OPTCAST_STORE_EXTERNAL=1 "$@" \
    "$grow" --marker "$work/shrunk" --timeout-ms 15000 > "$work/rank$r.out" 2> "$work/rank$r.err" &
  pid[$r]=$!
}
for r in 0 1 2 3; do rank $r; done
# Rank 2 dies once every rank is computing (before that, its death fails the bootstrap,
# not a collective): each says so after its first allreduce.
for _ in $(seq 600); do [ -e "$work/shrunk-up-0" ] && [ -e "$work/shrunk-up-1" ] && [ -e "$work/shrunk-up-2" ] && [ -e "$work/shrunk-up-3" ] && break; sleep 0.05; done
for r in 0 1 2 3; do [ -e "$work/shrunk-up-$r" ] || { echo "rank $r did not run an allreduce within 30 s: $(cat "$work/rank$r.out" "$work/rank$r.err")"; exit 1; }; done
kill -9 "${pid[2]}"
for _ in $(seq 300); do [ -e "$work/shrunk-0" ] && [ -e "$work/shrunk-1" ] && [ -e "$work/shrunk-3" ] && break; sleep 0.05; done
for r in 0 1 3; do
  [ -e "$work/shrunk-$r" ] || { echo "rank $r did not shrink: $(cat "$work/rank$r.out" "$work/rank$r.err")"; exit 1; }
  [ "$(cat "$work/shrunk-$r")" = "0,1,3" ] || { echo "rank $r shrank to $(cat "$work/shrunk-$r")"; exit 1; }
done

# A process in rank 2's slot that does not say it replaces it: refused, the job unharmed.
set +e
OPTCAST_RANK=2 OPTCAST_SIZE=4 OPTCAST_STORE=127.0.0.1:$port OPTCAST_STORE_EXTERNAL=1 "$grow" > "$work/plain.out" 2>&1
plain_rc=$?
# A replacement for rank 1, which is alive: refused.
OPTCAST_RANK=1 OPTCAST_SIZE=4 OPTCAST_STORE=127.0.0.1:$port OPTCAST_STORE_EXTERNAL=1 OPTCAST_REJOIN=1 "$grow" > "$work/alive.out" 2>&1
alive_rc=$?
set -e
[ $plain_rc -ne 0 ] && grep -q "comes as a replacement (OPTCAST_REJOIN=1)" "$work/plain.out" ||
  { echo "a plain process in a failed rank's slot: exit $plain_rc: $(cat "$work/plain.out")"; exit 1; }
[ $alive_rc -ne 0 ] && grep -q "refused rank 1: rank 1 is already connected" "$work/alive.out" ||
  { echo "a replacement for a live rank: exit $alive_rc: $(cat "$work/alive.out")"; exit 1; }
echo "refused: a plain process in a failed rank's slot, a replacement for a live rank"

start=$(date +%s%N)
rank 2 OPTCAST_REJOIN=1
for r in 0 1 2 3; do
  wait "${pid[$r]}" || { echo "rank $r failed: $(cat "$work/rank$r.out" "$work/rank$r.err")"; exit 1; }
  grep -q "rank $r: allreduce on {0,1,2,3} right" "$work/rank$r.out" || { echo "rank $r: $(cat "$work/rank$r.out")"; exit 1; }
  grep -q "rank $r: the job ended well" "$work/rank$r.out"
done
echo "replacement joined and all four ended well in $(( ($(date +%s%N) - start) / 1000000 )) ms: $(grep admitted "$work/rank2.out")"
wait $store_pid || { echo "store: exit $? for a job that grew and ended well: $(cat "$work/store.out" "$work/store.err")"; exit 1; }
grep -q "the job ended well" "$work/store.out"
echo "the store saw the job end well"
