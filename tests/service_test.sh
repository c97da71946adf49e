#!/usr/bin/env bash
# The service example across processes (examples/service.cpp): 3 replicas serve TCP
# clients on their own io_contexts (two threads each) while allreducing their counters
# and taking the leader's configuration. Without a fault every replica finishes with
# rounds done, every total the same on all replicas, and the job's success; with one
# replica killed (SIGKILL), the others name it, keep serving, shrink to themselves, go on
# agreeing on their totals, and end the job well (the store excused the dead one).
set -euo pipefail
service=$1

out=$("$service" --np 3 --duration-ms 1500 --period-ms 10)
echo "$out"
python3 - "$out" <<'PY'
import re, sys
lines = [l for l in sys.argv[1].splitlines() if " latency " in l]
assert len(lines) == 3, lines
for l in lines:
    m = re.search(r"served (\d+) requests; .* (\d+) rounds, (\d+) inconsistent totals, config version (\d+)", l)
    assert m, l
    served, rounds, bad, version = map(int, m.groups())
    assert served > 0 and rounds > 0 and bad == 0 and version >= 1, l
PY

set +e
out=$("$service" --np 3 --duration-ms 2000 --period-ms 10 --kill-rank 2 --kill-after-ms 1200 2>&1)
status=$?
set -e
echo "$out"
[ "$status" != 0 ] || { echo "the launcher reported success though replica 2 was killed"; exit 1; }
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
assert "rank 2 (pid" in out and "killed by signal 9" in out, "the launcher did not name the killed replica"
for r in (0, 1):
    assert re.search(rf"replica {r}: collectives stopped \(.*rank 2 died", out), f"replica {r} did not name rank 2"
    m = re.search(rf"replica {r}: served (\d+) requests after losing a peer; (\d+) rounds among the others after it", out)
    assert m and int(m.group(1)) > 0, f"replica {r} did not keep serving"
    assert int(m.group(2)) > 0, f"replica {r} did not go on with rounds among the survivors"
    assert f"replica {r}: going on with replicas {{0,1}}" in out, f"replica {r} did not shrink to {{0,1}}"
    assert re.search(rf"replica {r}: served \d+ requests; .* \d+ rounds, 0 inconsistent totals", out), f"replica {r}: totals differed"
    assert f"replica {r}: the job ended well" in out, f"replica {r}: the job did not end well"
print("optcast-service: the survivors named the dead replica, kept serving, shrank and went on agreeing")
PY
