#!/usr/bin/env bash
# Emulated hosts for the launch tests: N network namespaces on one bridge, each with an
# IPv4 and an IPv6 address and an /etc/hosts that names them all (ip netns exec mounts
# /etc/netns/<ns>/hosts over /etc/hosts). Nothing reaches the real network: the bridge
# is in a namespace of its own. No rate caps (../shared/tools/netcluster.sh has them, for
# benchmarks): these tests are about who finds whom.
#
#   netns.sh up TAG N [RAILS]  namespaces TAG-h0 .. TAG-h{N-1} and TAG-sw; with RAILS > 1
#                          every host also has eth1.. (10.97.R.(I+1), a bridge per rail)
#   netns.sh down TAG      remove them (and their /etc/netns entries)
#   netns.sh exec TAG I CMD...   run CMD in host I (its host name hI)
#   netns.sh addr I [6]    host I's address (IPv4, or IPv6 with 6)
#   netns.sh can TAG       exit 77 with the reason where namespaces cannot be made
# Host I is named hI, at 10.97.0.(I+1) and fd97::(I+1).
set -euo pipefail

addr() { if [ "${2:-4}" = 6 ]; then echo "fd97::$(($1 + 1))"; else echo "10.97.0.$(($1 + 1))"; fi; }

# Tags are two letters and the test's pid (oc123): a test killed before its cleanup ran
# (a timeout's SIGKILL) leaves its hosts behind, and the next test removes them.
sweep() {
  local sw tag
  for sw in $(ip netns list | awk '{print $1}' | grep -E '^[a-z]{2}[0-9]+-sw$' || true); do
    tag=${sw%-sw}
    kill -0 "${tag:2}" 2> /dev/null || down "$tag"
  done
}

up() {
  local tag=$1 n=$2 rails=${3:-1} sw="$1-sw"
  sweep
  ip netns add "$sw"
  for r in $(seq 0 $((rails - 1))); do
    ip netns exec "$sw" ip link add "br$r" type bridge
    ip netns exec "$sw" ip link set "br$r" up
  done
  ip netns exec "$sw" ip link set lo up
  local hosts=""
  for i in $(seq 0 $((n - 1))); do hosts+="$(addr "$i") h$i"$'\n'"$(addr "$i" 6) h$i"$'\n'; done
  for i in $(seq 0 $((n - 1))); do
    local ns="$tag-h$i"
    ip netns add "$ns"
    ip link add "$tag-v$i" type veth peer name eth0 netns "$ns"
    ip link set "$tag-v$i" netns "$sw"
    ip netns exec "$sw" ip link set "$tag-v$i" master br0 up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$(addr "$i")/24" dev eth0
    ip netns exec "$ns" ip -6 addr add "$(addr "$i" 6)/64" dev eth0 nodad
    ip netns exec "$ns" ip link set eth0 up
    for r in $(seq 1 $((rails - 1))); do
      ip link add "$tag-v${i}r$r" type veth peer name "eth$r" netns "$ns"
      ip link set "$tag-v${i}r$r" netns "$sw"
      ip netns exec "$sw" ip link set "$tag-v${i}r$r" master "br$r" up
      ip netns exec "$ns" ip addr add "10.97.$r.$((i + 1))/24" dev "eth$r"
      ip netns exec "$ns" ip link set "eth$r" up
    done
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n%s' "$hosts" > "/etc/netns/$ns/hosts"
  done
  # Up once h0 reaches the last host: a connection to a closed port is refused (not
  # timed out) once the path is there.
  for _ in $(seq 50); do
    local said
    said=$(ip netns exec "$tag-h0" timeout 1 bash -c "exec 3<>/dev/tcp/$(addr $((n - 1)))/9" 2>&1 || true)
    [[ $said == *refused* ]] && return 0
    sleep 0.1
  done
  echo "netns.sh: h0 cannot reach h$((n - 1))" >&2
  return 1
}

down() {
  local tag=$1
  for ns in $(ip netns list | awk '{print $1}' | grep "^$tag-" || true); do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
    rm -rf "/etc/netns/$ns"
  done
}

case "${1:-}" in
  # Exits 77 (a test's "skipped") saying why, where namespaces cannot be made here.
  can)
    [ "$(id -u)" = 0 ] || { echo "skipped: needs root (network namespaces)"; exit 77; }
    command -v ip > /dev/null || { echo "skipped: needs ip (Debian: iproute2)"; exit 77; }
    ip netns add "$2-probe" 2> /dev/null || { echo "skipped: cannot create network namespaces here"; exit 77; }
    ip netns del "$2-probe" ;;
  up) up "$2" "$3" "${4:-1}" ;;
  down) down "$2" ;;
  # Each host its own name too (a UTS namespace), as launchers' daemons expect.
  exec) tag=$2 i=$3; shift 3; exec ip netns exec "$tag-h$i" unshare --uts -- sh -c 'hostname "$0"; exec "$@"' "h$i" "$@" ;;
  addr) addr "$2" "${3:-4}" ;;
  *) echo "usage: netns.sh can TAG | up TAG N [RAILS] | down TAG | exec TAG I CMD... | addr I [6]" >&2; exit 2 ;;
esac
