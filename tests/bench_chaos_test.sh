#!/usr/bin/env bash
# optcast-bench chaos in small: jobs of 3 ranks over TCP, one killed (SIGKILL) and one
# stopped (SIGSTOP) rank per pair of trials. Every survivor must end with an error
# (none hangs, none reports success from the failed job, none holds wrong data), and
# the error must name the root cause: the dead rank, or the stopped one (found by the
# store's stall inquiry).
#
# With a store URL as the second argument (file:///DIR, a store that cannot tell who
# died, where a stall is looked into through keys every rank polls) the ranks meet there
# instead: a kill must still be named by every survivor (its connections end), and a stop
# by most of them (a survivor whose deadline comes before the inquiry's verdict, its
# polling being slower than the TCP store's word, fails on its own).
set -euo pipefail
bench=$1
store=${2:-}
dir=
if [ -n "$store" ]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT
  store=${store//@DIR@/$dir}
  out=$("$bench" chaos --np 3 --trials 4 --mode both --timeout-ms 1000 --store "$store" --json)
  left=$(find "$dir" -mindepth 1 | wc -l)
  [ "$left" = 0 ] || { echo "FAIL: the trials left $left entries in the file store"; exit 1; }
else
  out=$("$bench" chaos --np 3 --trials 4 --mode both --timeout-ms 1000 --json)
fi
python3 - "$out" "$store" <<'PY'
import json, sys
r, kv = json.loads(sys.argv[1]), sys.argv[2]
for fault in ("kill", "stop"):
    x = r[fault]
    assert x["injections"] == 2, (fault, x)
    assert x["survivors"] == 4, (fault, x)
    assert x["hangs"] == 0 and x["silent_survivors"] == 0 and x["wrong_results"] == 0, (fault, x)
    assert x["errors_with_cause"] + x["other_errors"] == 4, (fault, x)
    assert len(x["ms_to_error"]) == x["errors_with_cause"] + x["other_errors"], (fault, x)
assert r["kill"]["errors_with_cause"] == 4, r["kill"]
assert max(r["kill"]["ms_to_error"]) < 1000, r["kill"]
assert max(r["stop"]["ms_to_error"]) < 1000 + 1500, r["stop"]
if kv:
    assert r["store"] == kv, r
    # Through a kv store ~8-13% of a stop's survivors reach their own deadline before the
    # verdict (37 of 40 named in 20 trials here, 184 of 210 in GUIDE's figures): most, not
    # all (closing that gap is issue 47's).
    assert r["stop"]["errors_with_cause"] >= 2, r["stop"]
    print("optcast-bench chaos, ranks meeting in %s: every survivor failed, kills named, no hang" % kv)
else:
    assert r["stop"]["errors_with_cause"] == 4, r["stop"]
    print("optcast-bench chaos: every survivor failed naming the victim, no hang")
PY
