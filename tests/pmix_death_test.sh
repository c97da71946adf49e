#!/usr/bin/env bash
# A rank's death told by PMIx's event notification: 3 ranks over TCP under
# tests/pmix_launcher (a PMIx server that notifies, as PRRTE documents with --enable-recovery),
# rank 2 killed before any collective (no data connection to it exists). Ranks 0 and 1
# must take it for dead within 5 s, named by the PMIx server's word.
#   tests/pmix_death_test.sh PMIX_LAUNCHER PMIX_DEATH_RANK
set -euo pipefail
launcher=$1 rank=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
set +e
OPTCAST_LOG=info timeout 60 "$launcher" 3 "$rank" --wait-ms 5000 > "$tmp/out" 2> "$tmp/err"
rc=$?
set -e
cat "$tmp/out"
fail() { echo "FAIL: $*"; echo "--- stderr"; cat "$tmp/err"; exit 1; }
[ $rc -eq 0 ] || fail "the launcher exited $rc"
[ "$(grep -c 'rank 2 taken for dead after' "$tmp/out")" = 2 ] || fail "ranks 0 and 1 did not both take rank 2 for dead"
for r in 0 1; do
  grep -q "rank $r: rank 2 is lost: rank 2 ended abnormally, says the launcher's PMIx server" "$tmp/err" ||
    fail "rank $r did not name PMIx's word as the cause"
done
echo "both survivors heard of rank 2's death from PMIx"
