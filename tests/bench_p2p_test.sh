#!/usr/bin/env bash
# optcast-bench p2p on each multi-process fabric this machine has: its JSON names the
# fabric and carries positive figures, and both ranks leave the job in good order (rank 0
# hosts the store, as a job's rank does, and must not wait out its deadline for rank 1).
set -euo pipefail
bench=$1
for fabric in tcp ofi; do
  if [ "$fabric" = ofi ] && ! "$bench" p2p --help | grep -q ofi; then continue; fi
  start=$(date +%s)
  out=$(OPTCAST_TIMEOUT=30 OPTCAST_POLL=${OPTCAST_POLL:-adaptive} "$bench" p2p --fabric "$fabric" --bytes 1MiB --count 4 --runs 1 --json 2>/tmp/bench_p2p_$$.err) || {
    if [ "$fabric" = ofi ] && grep -q "libfabric" /tmp/bench_p2p_$$.err; then echo "ofi: $(head -1 /tmp/bench_p2p_$$.err) (skipped)"; continue; fi
    echo "FAIL: optcast-bench p2p --fabric $fabric exited non-zero:"; cat /tmp/bench_p2p_$$.err; exit 1; }
  took=$(($(date +%s) - start))
  rm -f /tmp/bench_p2p_$$.err
  python3 - "$fabric" "$out" <<'PY'
import json, sys
fabric, j = sys.argv[1], json.loads(sys.argv[2])
assert j["benchmark"] == "p2p" and j["fabric"].startswith(fabric), j
for k in ("optcast_GBps", "socket_GBps", "latency_8B_us", "socket_latency_8B_us"):
    assert j[k] > 0, (k, j)
assert abs(j["latency_ratio"] - j["latency_8B_us"] / j["socket_latency_8B_us"]) < 1e-6 * j["latency_ratio"], j
assert 0 <= j["idle_core_fraction"] < 1, j
PY
  [ "$took" -lt 20 ] || { echo "FAIL: p2p on $fabric took $took s: a rank waited for the other's goodbye"; exit 1; }
  echo "p2p on $fabric: $out ($took s)"
done
# A bad OPTCAST_POLL is named, not ignored.
if OPTCAST_POLL=busy "$bench" p2p --bytes 1KiB --count 1 --runs 1 >/dev/null 2>/tmp/bench_p2p_$$.err; then
  echo "FAIL: OPTCAST_POLL=busy was accepted"; exit 1; fi
grep -q "OPTCAST_POLL='busy'" /tmp/bench_p2p_$$.err || { echo "FAIL: no word of OPTCAST_POLL:"; cat /tmp/bench_p2p_$$.err; exit 1; }
rm -f /tmp/bench_p2p_$$.err
