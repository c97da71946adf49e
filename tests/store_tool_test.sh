#!/usr/bin/env bash
# `optcast store`: a job's TCP store served apart from its ranks (OPTCAST_STORE_EXTERNAL=1).
# Three hello ranks meet there and finish (the store exits 0: the job ended well); a job
# whose third rank never comes fails after --join-within, the store exiting 1 and the
# ranks naming the missing one; a rank told the store is external with a file store, and
# the tool without --np, are refused with a clear error.
#   tests/store_tool_test.sh OPTCAST_TOOL HELLO
set -euo pipefail
tool=$1 hello=$2
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export OPTCAST_SECRET=store-tool-test-secret-0123456789

serve() {  # NP JOIN_S: starts the store, sets $store_pid and $port
  "$tool" store --np "$1" --host 127.0.0.1 --port 0 --join-within "$2" > "$work/store.out" 2> "$work/store.err" &
  store_pid=$!
  for _ in $(seq 100); do grep -q "serving" "$work/store.out" 2>/dev/null && break; sleep 0.05; done
  port=$(sed -n 's/.* at 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/store.out")
  [ -n "$port" ] || { echo "no port in: $(cat "$work/store.out" "$work/store.err")"; exit 1; }
}
rank() {  # R NP: one hello rank of the store's job
  OPTCAST_RANK=$1 OPTCAST_SIZE=$2 OPTCAST_STORE=127.0.0.1:$port OPTCAST_STORE_EXTERNAL=1 OPTCAST_BOOTSTRAP_TIMEOUT=10 "$hello"
}

# A job that ends well.
serve 3 20
for r in 0 1 2; do rank $r 3 > "$work/rank$r.out" 2>&1 & done
for r in 0 1 2; do wait %$((r + 2)) || { echo "rank $r failed: $(cat "$work/rank$r.out")"; exit 1; }; done
for r in 0 1 2; do grep -q "rank $r got: hello from rank 0 of 3" "$work/rank$r.out"; done
wait $store_pid || { echo "store: exit $? for a job that ended well: $(cat "$work/store.out" "$work/store.err")"; exit 1; }
grep -q "the job ended well" "$work/store.out"
echo "a job of 3 met in optcast store and ended well"

# A job whose rank 2 never comes.
serve 3 1
for r in 0 1; do rank $r 3 > "$work/rank$r.out" 2>&1 & done
set +e
wait $store_pid; store_rc=$?
for r in 0 1; do wait %$((r + 2)); rc[$r]=$?; done
set -e
[ "$store_rc" = 1 ] || { echo "store: exit $store_rc, expected 1: $(cat "$work/store.out" "$work/store.err")"; exit 1; }
grep -q "the job failed" "$work/store.out"
for r in 0 1; do
  [ "${rc[$r]}" != 0 ] || { echo "rank $r succeeded without rank 2"; exit 1; }
  grep -q "rank 2" "$work/rank$r.out" || { echo "rank $r does not name rank 2: $(cat "$work/rank$r.out")"; exit 1; }
done
echo "a job missing rank 2 failed, naming it"

# Refusals.
set +e
msg=$(OPTCAST_RANK=0 OPTCAST_SIZE=1 OPTCAST_STORE=file://$work OPTCAST_JOB_ID=7 OPTCAST_STORE_EXTERNAL=1 "$hello" 2>&1); rc=$?
set -e
[ $rc != 0 ] && grep -q "OPTCAST_STORE_EXTERNAL is for optcast's TCP store" <<<"$msg" || { echo "file store with OPTCAST_STORE_EXTERNAL: rc $rc: $msg"; exit 1; }
set +e
msg=$("$tool" store 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--np" <<<"$msg" || { echo "store without --np: rc $rc: $msg"; exit 1; }
echo "refusals clear"
