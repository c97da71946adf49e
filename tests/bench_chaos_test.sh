#!/usr/bin/env bash
# optcast-bench chaos in small: jobs of 3 ranks over TCP, one killed (SIGKILL) and one
# stopped (SIGSTOP) rank per pair of trials. Every survivor must end with an error
# (none hangs, none reports success from the failed job, none holds wrong data), and
# the error must name the root cause: the dead rank, or the stopped one (found by the
# store's stall inquiry).
set -euo pipefail
bench=$1
out=$("$bench" chaos --np 3 --trials 4 --mode both --timeout-ms 1000 --json)
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
for fault in ("kill", "stop"):
    x = r[fault]
    assert x["injections"] == 2, (fault, x)
    assert x["survivors"] == 4, (fault, x)
    assert x["hangs"] == 0 and x["silent_survivors"] == 0 and x["wrong_results"] == 0, (fault, x)
    assert x["errors_with_cause"] + x["other_errors"] == 4, (fault, x)
    assert len(x["ms_to_error"]) == x["errors_with_cause"] + x["other_errors"], (fault, x)
assert r["kill"]["errors_with_cause"] == 4, r["kill"]
assert r["stop"]["errors_with_cause"] == 4, r["stop"]
assert max(r["kill"]["ms_to_error"]) < 1000, r["kill"]
assert max(r["stop"]["ms_to_error"]) < 1000 + 1500, r["stop"]
print("optcast-bench chaos: every survivor failed naming the victim, no hang")
PY
