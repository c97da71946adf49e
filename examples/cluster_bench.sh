#!/usr/bin/env bash
# Runs an optcast-bench command (broadcast unless COMMAND is given: broadcast, model,
# coll), or `optcast calibrate` (COMMAND calibrate), with one rank per emulated host of a netcluster (network namespaces h0..h{P-1}
# with rate-capped links; the store on h0), so that the links, not the CPU, decide.
# As root, after: netcluster.sh up P RATE
#
#   examples/cluster_bench.sh P [COMMAND] [options...]
#   e.g. examples/cluster_bench.sh 8 --sizes 64MiB --json
#        examples/cluster_bench.sh 4 model --calibrate --sizes 64KiB,1MiB,16MiB
#        examples/cluster_bench.sh 8 coll -l 8,1MiB,16MiB      (benchmarks/side_by_side.sh runs this)
#        examples/cluster_bench.sh 8 calibrate --output /tmp/cluster.json   (then OPTCAST_CALIBRATION=...)
#
# NETCLUSTER: path of netcluster.sh (default ../shared/tools/netcluster.sh from the
# repository); BENCH: path of optcast-bench (default build/examples/optcast-bench).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
P=${1:?usage: cluster_bench.sh P [broadcast|model|coll] [options]}
shift
cmd=broadcast
case "${1:-}" in broadcast|model|coll|calibrate) cmd=$1; shift ;; esac
quiet=()  # progress lines off where the command has them
case "$cmd" in broadcast|model) quiet=(--quiet) ;; esac
NC=${NETCLUSTER:-$here/../shared/tools/netcluster.sh}
BIN=${BENCH:-$here/build/examples/optcast-bench}
[ "$cmd" = calibrate ] && BIN=${OPTCAST_TOOL:-$here/build/tools/optcast}
[ -f "$NC" ] || { echo "cluster_bench: netcluster.sh not found (set NETCLUSTER)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "cluster_bench: $BIN not built" >&2; exit 2; }
store=$(bash "$NC" hosts | awk '$2 == "h0" {print $1}')
[ -n "$store" ] || { echo "cluster_bench: no cluster up (netcluster.sh up $P RATE)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pids=()
for r in $(seq 0 $((P - 1))); do
  bash "$NC" exec "h$r" env OPTCAST_RANK="$r" OPTCAST_SIZE="$P" OPTCAST_STORE="$store:29500" OPTCAST_JOB_ID=$$ \
    "$BIN" "$cmd" --fabric tcp "${quiet[@]}" "$@" >"$out/rank$r" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
cat "$out/rank0"
if [ $rc != 0 ]; then
  echo "cluster_bench: a rank failed:" >&2
  tail -n 3 "$out"/rank* >&2
fi
exit $rc
