#!/usr/bin/env bash
# A real Slurm on emulated hosts, for the launch tests and the cluster benchmarks:
# slurmctld on host 0, a slurmd on every host (each with its host's name, in its network
# namespace), munge for their credentials (started if none answers). As root.
#
#   slurm.sh up DIR 'EXEC' ADDR0 ADDR1 ...   configure in DIR (SLURM_CONF=DIR/slurm.conf),
#                                            start, wait until every node is idle
#   slurm.sh down DIR                        stop what `up` started
# EXEC runs a command on host I with {} replaced by I, e.g. 'ip netns exec oc1-h{}' or
# 'bash netcluster.sh exec h{}'. Hosts are named h0, h1, ...
set -uo pipefail

up() {
  local d=$1 exec=$2 r
  shift 2
  local addrs=("$@") n=$#
  on() { local i=$1; shift; ${exec//\{\}/$i} "$@"; }
  mkdir -p "$d/state"
  {
    echo "ClusterName=optcast-test"
    echo "SlurmctldHost=h0(${addrs[0]})"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "StateSaveLocation=$d/state"
    echo "SlurmdSpoolDir=$d/spool-%n"
    echo "SlurmctldPidFile=$d/slurmctld.pid"
    echo "SlurmdPidFile=$d/slurmd-%n.pid"
    echo "SlurmctldLogFile=$d/slurmctld.log"
    echo "SlurmdLogFile=$d/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    echo "ReturnToService=2"
    for r in $(seq 0 $((n - 1))); do echo "NodeName=h$r NodeAddr=${addrs[$r]} CPUs=$(nproc) State=UNKNOWN"; done
    echo "PartitionName=test Nodes=h[0-$((n - 1))] Default=YES MaxTime=INFINITE State=UP"
  } > "$d/slurm.conf"
  # The hosts' cgroups as this machine has them (v2 if /sys/fs/cgroup is one, else v1).
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then echo "CgroupPlugin=cgroup/v2" > "$d/cgroup.conf"
  else printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' > "$d/cgroup.conf"; fi
  if ! munge -n > /dev/null 2>&1; then  # no munged that answers (a zombie's name does not count)
    mkdir -p /run/munge && chown munge:munge /run/munge
    [ -f /etc/munge/munge.key ] || { mungekey --create 2> /dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2> /dev/null; }
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged --force || return 1
    touch "$d/munged-started"
    for _ in $(seq 50); do munge -n > /dev/null 2>&1 && break; sleep 0.1; done
  fi
  on 0 unshare --uts sh -c "hostname h0; SLURM_CONF=$d/slurm.conf exec slurmctld" || return 1
  for r in $(seq 0 $((n - 1))); do
    on "$r" unshare --uts sh -c "hostname h$r; SLURM_CONF=$d/slurm.conf exec slurmd -N h$r" || return 1
  done
  for _ in $(seq 100); do  # up once every node is idle
    [ "$(on 0 env SLURM_CONF="$d/slurm.conf" timeout 2 sinfo -h -t idle -o %D 2> /dev/null)" = "$n" ] && return 0
    sleep 0.2
  done
  echo "slurm.sh: not every node came up: $(tail -2 "$d"/*.log)" >&2
  return 1
}

down() {
  local d=$1 f pids=()
  for f in "$d"/slurmd-*.pid "$d"/slurmctld.pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
  [ -f "$d/munged-started" ] && [ -f /run/munge/munged.pid ] && pids+=("$(cat /run/munge/munged.pid)")
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2> /dev/null
  # slurmctld saves its state as it stops: gone before the caller removes DIR.
  for _ in $(seq 50); do
    kill -0 "${pids[@]}" 2> /dev/null || return 0
    sleep 0.1
  done
  return 0
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down "$2" ;;
  *) echo "usage: slurm.sh up DIR 'EXEC' ADDR... | down DIR" >&2; exit 2 ;;
esac
