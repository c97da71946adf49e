#!/usr/bin/env bash
# optcast-bench flood in small: rank 1 floods rank 0 with empty messages nobody receives.
# With room for them, all are held, in no more memory than the limits count for them, and
# the job's allreduces stay correct; with less room, the job ends with limit_exceeded
# naming the limit, having held less than it.
set -euo pipefail
bench=$1
# What holding costs is glibc malloc's: AddressSanitizer's allocator puts redzones around
# every chunk, so under it the memory figures are not checked (the rest is).
sanitized=0
if ldd "$bench" 2>/dev/null | grep -q -e libasan -e libtsan; then sanitized=1; fi
err=/tmp/bench_flood_$$.err
trap 'rm -f "$err"' EXIT
held=$(OPTCAST_UNEXPECTED_LIMIT=67108864 "$bench" flood --np 3 --frames 200000 --reps 200 --json 2>"$err") || {
  echo "FAIL: the flood within the limit exited non-zero:"; cat "$err"; exit 1; }
refused=$(OPTCAST_UNEXPECTED_LIMIT=33554432 "$bench" flood --np 3 --frames 400000 --reps 50 --json 2>"$err") || {
  echo "FAIL: the flood past the limit exited non-zero:"; cat "$err"; exit 1; }
python3 - "$held" "$refused" "$sanitized" <<'PY'
import json, sys
h, r, sanitized = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "1"

assert h["benchmark"] == "flood" and h["np"] == 3 and h["frames"] == 200000, h
assert h["held_all"] and h["ok"], h
assert h["limit_bytes"] == 64 << 20 and h["peer_limit_bytes"] == 64 << 20, h
# What holding took, measured in rank 0's resident memory, is within what was counted.
assert sanitized or 0 < h["bytes_per_message"] <= h["counted_per_message"], h
assert h["before_us"] > 0 and h["after_us"] > 0 and h["during_ops"] >= 1, h
assert not r["held_all"] and r["ok"], r
assert "OPTCAST_UNEXPECTED_LIMIT" in r["refused"] and "rank 1 sent a message of 0 B" in r["refused"], r
assert sanitized or r["rss_growth_bytes"] <= r["limit_bytes"], r
if sanitized:
    print("built with a sanitizer: the memory figures are not checked")
print("flood held: %.1f B a message (%d counted), allreduce %.1f us before, %.1f after; refused past %d B, having grown %d B"
      % (h["bytes_per_message"], h["counted_per_message"], h["before_us"], h["after_us"], r["limit_bytes"], r["rss_growth_bytes"]))
PY
