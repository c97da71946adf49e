#!/usr/bin/env bash
# Runs a benchmark and keeps its own output, stamped, for the docs' generated figures.
#
#   benchmarks/record.sh [--keep-failure] NAME -- COMMAND [ARGS...]      from the repository
#
# COMMAND's standard output goes to benchmarks/results/NAME/output.txt (and to the
# terminal), and benchmarks/results/NAME/run.json says when (UTC date), at which commit
# (with "+dirty" when the tree had changes) and with which command it was measured. A
# markdown block "<!-- figures: benchmarks/results/NAME output -->" then shows it
# (benchmarks/figures.py writes and checks such blocks; tests/figures_test.sh runs the
# check). Fails, keeping nothing, when COMMAND fails; with --keep-failure it keeps what a
# failing COMMAND printed (a chaos run that counts a failure is a measurement too), its
# exit status in run.json ("exit"), and still exits with that status.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
[ "${1:-}" = --help ] || [ "${1:-}" = -h ] && { usage; exit 0; }
keep_failure=0
[ "${1:-}" = --keep-failure ] && { keep_failure=1; shift; }
[ $# -ge 3 ] && [ "$2" = -- ] || { echo "record.sh: usage: record.sh NAME -- COMMAND [ARGS...] (see --help)" >&2; exit 2; }
name=$1; shift 2
[[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "record.sh: NAME '$name' may hold letters, digits, '.', '_' and '-' only" >&2; exit 2; }
dir=$here/benchmarks/results/$name
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
status=0
"$@" | tee "$tmp/output.txt" || status=${PIPESTATUS[0]}
[ "$status" = 0 ] || [ "$keep_failure" = 1 ] || exit "$status"
mkdir -p "$dir"
mv "$tmp/output.txt" "$dir/output.txt"
if [ "$status" = 0 ]; then python3 "$here/benchmarks/stamp.py" "$dir" output "$*"
else python3 "$here/benchmarks/stamp.py" "$dir" output "$*" "exit=$status"; fi
echo "record.sh: kept in ${dir#$here/}$([ "$status" = 0 ] || echo " (the command exited $status)")" >&2
exit "$status"
