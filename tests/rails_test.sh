#!/usr/bin/env bash
# Rails and hosts for real: 2 emulated hosts (network namespaces, tests/cluster/netns.sh)
# with 2 interfaces each, 2 ranks per host, running optcast-bench coll's multi-lane
# broadcast, allreduce, allgather, scatter and gather (every result checked on every
# rank). Then:
#   - both rails carried the data: eth1 sent a good share of what crossed between the hosts;
#   - what crossed between the hosts went through the links, not around them: the two
#     hosts' interfaces together sent at least what the collectives must move between
#     hosts (ranks of different hosts share one kernel here, but never memory);
#   - ranks of one host talked over their own host (shared memory), not the links: each
#     rank's log names rings with the other rank of its host and with no rank of the
#     other host (whose abstract unix socket is in another network namespace), and each
#     rank's loop looks at its rings first (a rank of its host may write there);
#   - each rank counts all 4 as sharing its cores (the hosts are namespaces of one
#     machine: whether an empty poll yields depends on that count, not on the host's);
#   - a rank with no peer on its host looks at its sockets every turn of its loop (a job
#     of one rank per host: the rings carry nothing there).
#
#   tests/rails_test.sh OPTCAST_BENCH          (root; exit 77 where it cannot run)
set -uo pipefail
BENCH=${1:?usage: rails_test.sh path/to/optcast-bench}
here=$(cd "$(dirname "$0")" && pwd)
NS="$here/cluster/netns.sh"
TAG="or$$"
bash "$NS" can "$TAG" || exit $?
work=$(mktemp -d)
cleanup() { bash "$NS" down "$TAG"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
bash "$NS" up "$TAG" 2 2 || { echo "FAIL: cannot set up 2 hosts with 2 rails"; exit 1; }

tx() { bash "$NS" exec "$TAG" "$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }
declare -A before
for h in 0 1; do for i in eth0 eth1; do before[$h$i]=$(tx $h $i); done; done

size=$((4 << 20))
pids=()
for r in 0 1 2 3; do
  bash "$NS" exec "$TAG" $((r / 2)) env OPTCAST_RANK=$r OPTCAST_SIZE=4 OPTCAST_STORE=10.97.0.1:29700 OPTCAST_JOB_ID=$$ \
    OPTCAST_LOG=debug OPTCAST_BOOTSTRAP_TIMEOUT=10000 timeout 120 "$BENCH" coll --fabric tcp -o bcast,allreduce,allgather,scatter,gather \
    -l $size -t 0.3 -m 3 -r 3 --alg multi_lane > "$work/rank$r" 2>&1 &
  pids+=($!)
done
failures=0
for r in 0 1 2 3; do
  wait "${pids[$r]}" || { echo "FAIL: rank $r exited with $?: $(tail -3 "$work/rank$r")"; failures=$((failures + 1)); }
done
[ $failures = 0 ] || exit 1
grep -q "2 hosts x 2 ranks, 2 rails" "$work/rank0" || { echo "FAIL: rank 0 did not log the job's layout as 2 hosts x 2 ranks, 2 rails:"; head -5 "$work/rank0"; exit 1; }
for op in bcast allreduce allgather scatter gather; do
  grep -Eq "^optcast $op $size .* ok$" "$work/rank0" || { echo "FAIL: no verified $op line:"; cat "$work/rank0"; exit 1; }
  grep -q "# $op $size: multi_lane" "$work/rank0" || { echo "FAIL: $op did not run multi_lane"; exit 1; }
done
for r in 0 1 2 3; do
  mate=$((r ^ 1))
  grep -q "rank $r: rings with rank $mate " "$work/rank$r" || { echo "FAIL: rank $r set up no rings with rank $mate, of its host"; exit 1; }
  grep -q "rank $r: its loop looks at the network first" "$work/rank$r" || { echo "FAIL: rank $r, with a rank of its host, does not look at its rings first"; exit 1; }
  # Peers on the other host too: where its 4 ranks outnumber this machine's cores and an
  # empty turn yields, it looks at its sockets before each yield.
  if [ "$(nproc)" -lt 4 ]; then
    grep -q "rank $r: its loop looks at the network first, its reactor every few turns and before each yield" "$work/rank$r" ||
      { echo "FAIL: rank $r, yielding with peers on another host, does not look at its sockets before each yield"; exit 1; }
  elif grep -q "before each yield" "$work/rank$r"; then
    echo "FAIL: rank $r yields on a machine with a core for each rank"; exit 1
  fi
  grep -q "rank $r: 4 ranks of the job on this machine" "$work/rank$r" || { echo "FAIL: rank $r does not count the 4 ranks of this machine as sharing its cores"; exit 1; }
  if grep -E "rank $r: rings with rank [$(( (r / 2) * 2 == 0 ? 2 : 0 ))$(( (r / 2) * 2 == 0 ? 3 : 1 ))] " "$work/rank$r"; then
    echo "FAIL: rank $r set up rings with a rank of the other host"; exit 1
  fi
done
reps=$(awk -v s=$size '$1 == "optcast" && $3 == s {n += $4 + 1} END {print n}' "$work/rank0")  # + the warm-up each
sent0=0 sent1=0
for h in 0 1; do
  sent0=$((sent0 + $(tx $h eth0) - before[${h}eth0]))
  sent1=$((sent1 + $(tx $h eth1) - before[${h}eth1]))
done
# Between 2 hosts, per repetition (m = size): a broadcast moves m one way, an allreduce m
# each way, an allgather of m per rank 2 m each way, a scatter or gather of m per rank
# 2 m one way: about 2 m per repetition at least.
need=$((reps * 2 * size / 3))
echo "eth0 sent $sent0 B, eth1 sent $sent1 B over $reps repetitions; at least $need B must cross between the hosts"
[ $((sent0 + sent1)) -ge $need ] || { echo "FAIL: the links carried less than the inter-host volume: traffic went around them"; exit 1; }
[ "$sent1" -ge $((sent0 / 3)) ] || { echo "FAIL: rail 1 (eth1) carried too little of it ($sent1 of $((sent0 + sent1)) B)"; exit 1; }

# One rank per host: nothing comes through the rings, everything through the sockets.
pids=()
for r in 0 1; do
  bash "$NS" exec "$TAG" $r env OPTCAST_RANK=$r OPTCAST_SIZE=2 OPTCAST_STORE=10.97.0.1:29701 OPTCAST_JOB_ID=$(($$ + 1)) \
    OPTCAST_LOG=debug OPTCAST_BOOTSTRAP_TIMEOUT=10000 timeout 60 "$BENCH" coll --fabric tcp -o allreduce -l 8 -t 0.1 -m 3 -r 3 \
    > "$work/alone$r" 2>&1 &
  pids+=($!)
done
for r in 0 1; do
  wait "${pids[$r]}" || { echo "FAIL: rank $r of one per host exited with $?: $(tail -3 "$work/alone$r")"; exit 1; }
  grep -Eq "^optcast allreduce 8 .* ok$" "$work/alone$r" || [ $r != 0 ] || { echo "FAIL: no verified allreduce line"; cat "$work/alone$r"; exit 1; }
  grep -q "rank $r: its loop looks at its reactor every turn" "$work/alone$r" || { echo "FAIL: rank $r, alone on its host, does not look at its sockets every turn"; exit 1; }
  grep -q "rank $r: 2 ranks of the job on this machine" "$work/alone$r" || { echo "FAIL: rank $r does not count both ranks of this machine"; exit 1; }
done
echo "rails test passed"
