#!/usr/bin/env bash
# examples/torch_elastic.py: DDP on 4 workers over backend "optcast", worker 2 killed
# (SIGKILL) at step 10; the survivors' step must fail, they shrink (optcast_torch.shrink)
# to 3, rebuild DDP and finish; their losses from the step they went on from must equal a
# fresh 3-worker run's from the checkpoint the new rank 0 wrote there.
#   tests/torch_elastic_test.sh EXAMPLES_DIR     (PYTHONPATH: the optcast_torch module)
# Exits 77 where torch or optcast_torch is missing.
set -euo pipefail
examples=$1
/usr/bin/python3 -c "import torch.distributed, optcast_torch" 2>/dev/null ||
  { echo "skipped: torch or optcast_torch is not importable by /usr/bin/python3"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
/usr/bin/python3 "$examples/torch_elastic.py" --np 4 --kill-rank 2 --kill-step 10 --steps 30 --port "$(port)" \
  --checkpoint "$work/ck.pt" --json > "$work/survivors.json" 2> "$work/survivors.err" ||
  { echo "the job with a kill failed:"; cat "$work/survivors.json" "$work/survivors.err"; exit 1; }
/usr/bin/python3 "$examples/torch_elastic.py" --np 3 --resume "$work/ck.pt" --steps 30 --port "$(port)" --json \
  > "$work/fresh.json" 2> "$work/fresh.err" || { echo "the fresh 3-worker run failed:"; cat "$work/fresh.err"; exit 1; }
/usr/bin/python3 - "$work/survivors.json" "$work/fresh.json" "$work/survivors.err" <<'PY'
import json, sys
s, f = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
err = open(sys.argv[3]).read()
assert s["ranks_at_start"] == 4 and s["ranks_at_end"] == 3, s
assert len(s["shrinks"]) == 1 and s["shrinks"][0]["ranks"] == 3, s["shrinks"]
at = s["shrinks"][0]["at_step"]
assert at == 10, f"went on from step {at}, not the step the worker died in (10)"
assert err.count("failed (optcast") == 3, f"not every survivor's step 10 failed:\n{err}"
assert f["resumed_at"] == at and f["ranks_at_end"] == 3, f
assert sorted(map(int, s["losses"])) == list(range(30)), sorted(s["losses"])
after = {k: v for k, v in s["losses"].items() if int(k) >= at}
assert sorted(after) == sorted(f["losses"]), (sorted(after), sorted(f["losses"]))
worst = max(abs(after[k] - f["losses"][k]) / max(abs(f["losses"][k]), 1e-12) for k in after)
assert worst <= 1e-6, f"the survivors' losses differ from a fresh 3-worker run's by {worst:.2e} (relative)"
print(f"shrunk 4 -> 3 at step {at} in {s['shrinks'][0]['ms']:.1f} ms; losses of steps {at}..29 equal a fresh "
      f"3-worker run's (largest relative difference {worst:.1e}); last loss {s['losses']['29']:.6f}")
PY
