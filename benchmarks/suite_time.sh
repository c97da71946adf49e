#!/usr/bin/env bash
# How long a test suite takes here: runs `meson test -C build [--suite SUITE]` and prints
# one line (tests, passed, failed, skipped, wall time). For benchmarks/record.sh, so that
# docs/TESTING.md shows measured durations.
#
#   benchmarks/suite_time.sh [SUITE]        from the repository, after a build
set -euo pipefail
[ "${1:-}" = --help ] && { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
args=(-C build)
[ -n "${1:-}" ] && args+=(--suite "$1")
start=$(date +%s.%N)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
status=0
meson test "${args[@]}" >"$log" 2>&1 || status=$?
end=$(date +%s.%N)
count() { awk -v k="$1:" '$1 == k {print $2}' "$log"; }
printf '%s: %s tests passed, %s failed, %s skipped, in %.0f s wall (%s)\n' "${1:-every suite}" "$(count Ok)" "$(count Fail)" \
  "$(count Skipped)" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" "$(nproc) cores"
exit $status
