#!/usr/bin/env bash
# Open MPI's mpirun as a launcher only (the program needs no MPI) on emulated hosts, for
# the launch tests and the cluster benchmarks: mpirun runs on host 0 and reaches hosts
# h0..h{NP-1} through an rsh agent that enters their network namespaces. As root.
#
#   mpirun.sh 'EXEC' WORK CIDR NP [MPIRUN_OPTION...] -- PROGRAM [ARG...]
#
# EXEC runs a command on host I with {} replaced by I ('ip netns exec oc1-h{}',
# 'bash netcluster.sh exec h{}'); WORK is a directory of this run's own; CIDR the
# hosts' subnet (mpirun's daemons talk over it, IPv4). Each rank's stdout and stderr go
# to WORK/rank<R> (when RANK_OUTPUT=1) or to mpirun's. Exits with mpirun's status.
#
# With every host under one host name (plain `ip netns exec`), about one start in ten hung
# before any rank started: mpirun waited forever for one of its daemons (orted) to report
# back. EXEC must give each host its own name (netcluster.sh and tests/cluster/netns.sh
# do); none has hung since, in 67 starts. Should a run still not have started every rank
# within START_TIMEOUT seconds (default 20), it is stopped and tried again, up to three
# times, and said so on stderr; a run whose ranks all started is never retried.
set -uo pipefail
exec_tpl=${1:?usage: mpirun.sh EXEC WORK CIDR NP [option...] -- PROGRAM [ARG...]}
work=$2 cidr=$3 np=$4
shift 4
opts=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
[ "${1:-}" = -- ] || { echo "mpirun.sh: no -- before the program" >&2; exit 2; }
shift
[ $# -gt 0 ] || { echo "mpirun.sh: no program" >&2; exit 2; }
command -v mpirun > /dev/null || { echo "mpirun.sh: mpirun is not installed (Debian: openmpi-bin)" >&2; exit 2; }
mkdir -p "$work"

# The agent is called as `agent HOST COMMAND...`, HOST one of --host's names (hI).
cat > "$work/rsh_agent" << EOF
#!/bin/sh
host=\$1; shift
i=\${host#h}
exec \$(echo '$exec_tpl' | sed "s/{}/\$i/g") sh -c "\$*" 2>> "$work/rsh_agent.log"
EOF
# Each rank marks that it started (how a stuck launch is told from a slow program).
cat > "$work/start_rank" << EOF
#!/bin/sh
touch "$work/started.\$PMIX_RANK"
[ "\${RANK_OUTPUT:-}" = 1 ] && exec "\$@" > "$work/rank\$PMIX_RANK" 2>&1
exec "\$@"
EOF
chmod +x "$work/rsh_agent" "$work/start_rank"

hosts=$(seq -s, -f 'h%g' 0 $((np - 1)))
# mpirun passes on only the variables it is told to: optcast's and the sanitizers'.
pass=(-x RANK_OUTPUT)
for v in $(compgen -e); do
  case $v in OPTCAST_* | ASAN_OPTIONS | LSAN_OPTIONS | UBSAN_OPTIONS | TSAN_OPTIONS) pass+=(-x "$v") ;; esac
done
export RANK_OUTPUT=${RANK_OUTPUT:-0}
on0=${exec_tpl//\{\}/0}

for attempt in 1 2 3; do
  rm -f "$work"/started.*
  $on0 mpirun --allow-run-as-root --host "$hosts" -np "$np" \
    --mca plm_rsh_agent "$work/rsh_agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$cidr" --mca btl_tcp_if_include "$cidr" --mca oob_tcp_disable_ipv6_family 1 \
    "${opts[@]}" "${pass[@]}" "$work/start_rank" "$@" &
  pid=$!
  started=0
  for _ in $(seq $((${START_TIMEOUT:-20} * 10))); do
    started=$(find "$work" -maxdepth 1 -name 'started.*' | wc -l)
    [ "$started" -ge "$np" ] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  if [ "$started" -ge "$np" ] || ! kill -0 "$pid" 2> /dev/null; then
    wait "$pid"
    exit $?
  fi
  echo "mpirun.sh: $started of $np ranks started within ${START_TIMEOUT:-20} s (mpirun's daemons did not all report back); stopping it" \
    "$([ $attempt -lt 3 ] && echo "and trying again" || echo "(third try)")" >&2
  # mpirun is $pid (every EXEC here execs); its daemons name the agent on their command line.
  kill "$pid" 2> /dev/null
  for _ in $(seq 20); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2> /dev/null
  pkill -9 -f "^[^ ]*orted .*$work/rsh_agent" 2> /dev/null
  wait "$pid" 2> /dev/null
done
exit 124
