#!/usr/bin/env bash
# optcast-bench chaos --shrink in small: jobs of 5 ranks over TCP, one rank killed or
# stopped per trial (and, in the second run, a second rank killed while the survivors
# shrink). Every survivor must shrink to a communicator that works (a checked allreduce,
# verified collectives, an agreement that all went well), all of them to the same
# membership, without the victim; none may hang, fail or hold wrong data; and each
# one's leave() must succeed (the store no longer counts the ranks they excused). Then
# rank 0 is the victim, the store served apart from the ranks (--store launcher); and
# the ranks meet in a file store.
#   tests/bench_chaos_shrink_test.sh OPTCAST_BENCH [ofi]
# With `ofi`, the same over libfabric's tcp;ofi_rxm (exit 77 where it is missing).
set -euo pipefail
bench=$1
fabric=${2:-tcp}
[ "$fabric" = ofi ] && . "$(dirname "$0")/ofi_rxm.sh"
# The benchmark exits 1 when a survivor did not end well; check() then names which (its
# first_failure) rather than the script ending in silence.
check() {
  python3 - "$1" "$2" <<'PY'
import json, sys
r, fault = json.loads(sys.argv[1]), sys.argv[2]
x = r[fault]
assert x["injections"] > 0, r
assert x["survivors"] == x["injections"] * (r["np"] - (2 if fault == "kill+kill" else 1)), x
for k in ("done", "same_membership", "victim_left_out"):
    assert x[k] == x["survivors"], (k, x)
assert x["failed"] == 0 and x["wrong_results"] == 0 and x["hangs"] == 0, x.get("first_failure") or x
assert len(x["ms_to_usable"]) == x["survivors"], x
# The survivors excused the victims at the store: their job ends well. Survivors that
# kept a second victim (it died after their last round) were right to, and its death then
# fails their job's outcome: only they may leave unsuccessfully.
assert x["left_ok"] + x["second_victim_kept"] >= x["survivors"], x
print(fault, "survivors", x["survivors"], "usable after (ms, max)", round(max(x["ms_to_usable"]), 1))
PY
}
out=$("$bench" chaos --fabric "$fabric" --np 5 --trials 4 --mode both --shrink --ops-after 10 --timeout-ms 1000 --json --quiet || true)
check "$out" kill
check "$out" stop
# With the store apart from the ranks (this benchmark serves it), rank 0 dies too.
out=$("$bench" chaos --fabric "$fabric" --np 5 --trials 2 --mode both --shrink --store launcher --victim 0 --ops-after 10 --timeout-ms 1000 --json --quiet || true)
check "$out" kill
check "$out" stop
# Meeting in a file store, which knows nothing of who is alive: the survivors' excusal
# is written there too, and their job ends well. Nothing there tells a survivor of the
# death but the others' revocation or its own deadline, and the agreement takes a member
# that has not answered within the deadline for failed: 1 s was too short for a rank
# under ASan on 2 busy cores (1 run in ~20 excluded a live survivor).
if [ "$fabric" = tcp ]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  out=$("$bench" chaos --np 5 --trials 2 --mode both --shrink --store "file://$dir" --ops-after 10 --timeout-ms 2500 --json --quiet || true)
  check "$out" kill
  check "$out" stop
fi
out=$("$bench" chaos --fabric "$fabric" --np 5 --trials 3 --mode kill --shrink --second-kill --ops-after 10 --timeout-ms 1000 --json --quiet || true)
check "$out" kill+kill
