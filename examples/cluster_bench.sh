#!/usr/bin/env bash
# Runs the demo (COMMAND demo), an optcast-bench command (broadcast unless COMMAND is
# given: broadcast, model, coll), or `optcast calibrate` (COMMAND calibrate), with one rank
# per emulated host of a netcluster (network namespaces h0..h{P-1} with rate-capped links),
# so that the links, not the CPU, decide. As root, after: netcluster.sh up P RATE
#
#   examples/cluster_bench.sh P [COMMAND] [options...]
#   e.g. examples/cluster_bench.sh 8 --sizes 64MiB --json
#        examples/cluster_bench.sh 8 demo --bytes 64MiB
#        LAUNCH=srun examples/cluster_bench.sh 8 demo
#        examples/cluster_bench.sh 4 model --calibrate --sizes 64KiB,1MiB,16MiB
#        examples/cluster_bench.sh 8 coll -l 8,1MiB,16MiB      (benchmarks/side_by_side.sh runs this)
#        examples/cluster_bench.sh 8 calibrate --output /tmp/cluster.json   (then OPTCAST_CALIBRATION=...)
#        examples/cluster_bench.sh 8 python examples/torch_bench.py   (a torch.distributed program:
#          torchrun's variables, the store on h0, PYTHONPATH to build/bindings/torch)
#
# LAUNCH: how the ranks are started:
#   env     (default) OPTCAST_RANK, OPTCAST_SIZE and OPTCAST_STORE (the TCP store on h0)
#   mpirun  Open MPI's mpirun on h0, into the hosts through an rsh agent (PMIx; no store)
#           (tests/cluster/mpirun.sh)
#   srun    Slurm's srun -N P -n P on h0; a slurmctld on h0 and a slurmd on every host are
#           started for the run and stopped after (tests/cluster/slurm.sh), unless
#           SLURM_CONF names a Slurm already running on the hosts
# PPN: ranks per host (default 1; env launch only), placed in blocks: ranks r PPN ..
# r PPN + PPN - 1 on host r, P PPN ranks in all. With RAILS interfaces per host
# (netcluster.sh up P RATE RAILS) every rank sends through all of them (OPTCAST_IFNAME=eth).
# Every OPTCAST_* variable set here reaches every rank, whatever the launcher; without
# OPTCAST_SECRET or OPTCAST_SECRET_FILE the ranks get a fresh job secret.
# NETCLUSTER: path of netcluster.sh (default ../shared/tools/netcluster.sh from the
# repository); BENCH, DEMO: optcast-bench's, optcast-demo's path (default: in build/examples).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: [LAUNCH=env|mpirun|srun] cluster_bench.sh P [demo|broadcast|model|coll|calibrate|python SCRIPT] [options]"
case "${1:-}" in -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
P=${1:?$usage}
[[ "$P" =~ ^[0-9]+$ ]] && [ "$P" -ge 1 ] || { echo "cluster_bench: P must be a number of hosts; $usage" >&2; exit 2; }
shift
cmd=broadcast
case "${1:-}" in demo|broadcast|model|coll|calibrate|python) cmd=$1; shift ;; esac
launch=${LAUNCH:-env}
case "$launch" in env|mpirun|srun) ;; *) echo "cluster_bench: LAUNCH=$launch: env, mpirun or srun" >&2; exit 2 ;; esac
PPN=${PPN:-1}
[[ "$PPN" =~ ^[0-9]+$ ]] && [ "$PPN" -ge 1 ] || { echo "cluster_bench: PPN must be a number of ranks per host" >&2; exit 2; }
[ "$PPN" = 1 ] || [ "$launch" = env ] || { echo "cluster_bench: PPN > 1 with LAUNCH=env only" >&2; exit 2; }
args=("$cmd" --fabric tcp)  # the program's own arguments before the user's
case "$cmd" in broadcast|model) args+=(--quiet) ;; esac  # progress lines off where the command has them
NC=${NETCLUSTER:-$here/../shared/tools/netcluster.sh}
BIN=${BENCH:-$here/build/examples/optcast-bench}
[ "$cmd" = calibrate ] && BIN=${OPTCAST_TOOL:-$here/build/tools/optcast}
[ "$cmd" = demo ] && { BIN=${DEMO:-$here/build/examples/optcast-demo}; args=(--fabric tcp); }
[ "$cmd" = python ] && { BIN=/usr/bin/python3; args=(); }  # Debian's torch is for the system's Python
[ "$cmd" = python ] && [ "$launch" != env ] && { echo "cluster_bench: python runs with LAUNCH=env only" >&2; exit 2; }
[ -f "$NC" ] || { echo "cluster_bench: netcluster.sh not found (set NETCLUSTER)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "cluster_bench: $BIN not built" >&2; exit 2; }
mapfile -t addrs < <(bash "$NC" hosts 2> /dev/null | awk '{print $1}')
[ "${#addrs[@]}" -ge "$P" ] || { echo "cluster_bench: no cluster of $P hosts up (netcluster.sh up $P RATE)" >&2; exit 2; }
addrs=("${addrs[@]:0:$P}")
store=${addrs[0]}
out=$(mktemp -d)
slurm=
cleanup() {
  [ -n "$slurm" ] && bash "$here/tests/cluster/slurm.sh" down "$out/slurm"
  rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
# A job secret, as optcast's own launcher gives its ranks (unless the caller set one, or
# OPTCAST_SECRET= for none): the ranks authenticate (those of one host meet through
# shared memory either way, OPTCAST_SHM).
if [ -z "${OPTCAST_SECRET+set}${OPTCAST_SECRET_FILE+set}" ]; then
  (umask 077 && head -c 24 /dev/urandom | base64 > "$out/secret")
  export OPTCAST_SECRET_FILE="$out/secret"
fi
rc=0
case "$launch" in
  env)
    pids=()
    NP=$((P * PPN))
    for r in $(seq 0 $((NP - 1))); do
      if [ "$cmd" = python ]; then
        vars=(RANK="$r" WORLD_SIZE="$NP" MASTER_ADDR="$store" MASTER_PORT=29500 LOCAL_RANK=$((r % PPN))
              PYTHONPATH="$here/build/bindings/torch${PYTHONPATH:+:$PYTHONPATH}")
      else
        vars=(OPTCAST_RANK="$r" OPTCAST_SIZE="$NP" OPTCAST_STORE="$store:29500" OPTCAST_JOB_ID=$$)
      fi
      bash "$NC" exec "h$((r / PPN))" env "${vars[@]}" "$BIN" "${args[@]}" "$@" > "$out/rank$r" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    ;;
  mpirun)
    RANK_OUTPUT=1 bash "$here/tests/cluster/mpirun.sh" "bash $NC exec h{}" "$out" "${store%.*}.0/24" "$P" -- \
      "$BIN" "${args[@]}" "$@" || rc=1
    ;;
  srun)
    if [ -z "${SLURM_CONF:-}" ]; then
      echo "cluster_bench: starting Slurm on h0..h$((P - 1))" >&2
      slurm=1
      bash "$here/tests/cluster/slurm.sh" up "$out/slurm" "bash $NC exec h{}" "${addrs[@]}" ||
        { echo "cluster_bench: cannot start Slurm" >&2; exit 1; }
      export SLURM_CONF="$out/slurm/slurm.conf"
    fi
    bash "$NC" exec h0 env SLURM_CONF="$SLURM_CONF" srun -N "$P" -n "$P" --output="$out/rank%t" \
      "$BIN" "${args[@]}" "$@" || rc=1
    ;;
esac
cat "$out/rank0"
if [ $rc != 0 ]; then
  echo "cluster_bench: a rank failed:" >&2
  tail -n 3 "$out"/rank* >&2
fi
exit $rc
