#!/usr/bin/env bash
# optcast-bench chaos --shrink --grow in small: jobs of 5 ranks over TCP, one rank killed or
# stopped per trial; once the survivors have shrunk, a replacement for it (OPTCAST_REJOIN=1)
# joins through the store and the survivors grow. Every survivor and the replacement must
# end on one communicator that works (a checked allreduce, verified collectives, an
# agreement), all with the same membership, the replacement in; none may hang, fail or hold
# wrong data; each one's leave() must succeed (the store counts the replacement as the
# rank it replaced). Then rank 0 is the victim, the store served apart (--store launcher);
# then a survivor is killed while they grow: they shrink it out and grow again. And a
# file store, through which no replacement joins, is refused with the reason.
#   tests/bench_chaos_grow_test.sh OPTCAST_BENCH [ofi]
# With `ofi`, the same over libfabric's tcp;ofi_rxm (exit 77 where it is missing): the
# members put the replacement's endpoint in the dead one's place.
set -euo pipefail
bench=$1
fabric=${2:-tcp}
[ "$fabric" = ofi ] && . "$(dirname "$0")/ofi_rxm.sh"
check() {
  python3 - "$1" "$2" <<'PY'
import json, sys
r, growth = json.loads(sys.argv[1]), sys.argv[2]
np = r["np"]
for fault in ("kill", "stop"):
    if fault not in r:
        continue
    x = r[fault]
    assert x["survivors"] == x["injections"] * (np - 1), x
    for k in ("done", "same_membership", "victim_left_out"):
        assert x[k] == x["survivors"], (k, x)
    assert x["failed"] == 0 and x["wrong_results"] == 0 and x["hangs"] == 0, x
g = r[growth]
assert g["cycles"] > 0, r
assert g["members"] == g["cycles"] * (np - (1 if growth == "grow+kill" else 0)), g
for k in ("regrown", "same_membership", "replacement_in"):
    assert g[k] == g["members"], (k, g)
assert g["failed"] == 0 and g["wrong_results"] == 0 and g["hangs"] == 0, g
assert len(g["ms_to_grown"]) == g["cycles"] and len(g["ms_to_admitted"]) == g["cycles"], g
# The replacement counts as the rank it replaced: the job ends well, but where a second
# victim was kept (it died after their last round), whose death then fails the outcome.
assert g["left_ok"] + g["second_victim_kept"] >= g["members"], g
print(growth, "cycles", g["cycles"], "members", g["members"], "grown after (ms, max)", round(max(g["ms_to_grown"]), 1))
PY
}
out=$("$bench" chaos --fabric "$fabric" --np 5 --trials 4 --mode both --shrink --grow --ops-after 10 --timeout-ms 1000 --json --quiet)
check "$out" grow
out=$("$bench" chaos --fabric "$fabric" --np 5 --trials 2 --mode kill --shrink --grow --store launcher --victim 0 --ops-after 10 --timeout-ms 1000 --json --quiet)
check "$out" grow
out=$("$bench" chaos --fabric "$fabric" --np 5 --trials 3 --mode kill --shrink --grow --second-kill --ops-after 10 --timeout-ms 1000 --json --quiet)
check "$out" grow+kill
[ "$fabric" = tcp ] || exit 0
set +e
dir=$(mktemp -d)
msg=$("$bench" chaos --np 5 --trials 1 --mode kill --shrink --grow --store "file://$dir" --quiet 2>&1)
rc=$?
rm -rf "$dir"
set -e
[ $rc -eq 2 ] && grep -q "a replacement joins through optcast's TCP store" <<< "$msg" || { echo "--grow over a file store: exit $rc: $msg"; exit 1; }
echo "refused: --grow over a file store"
