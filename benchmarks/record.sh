#!/usr/bin/env bash
# Runs a benchmark and keeps its own output, stamped, for the docs' generated figures.
#
#   benchmarks/record.sh NAME -- COMMAND [ARGS...]      from the repository
#
# COMMAND's standard output goes to benchmarks/results/NAME/output.txt (and to the
# terminal), and benchmarks/results/NAME/run.json says when (UTC date), at which commit
# (with "+dirty" when the tree had changes) and with which command it was measured. A
# markdown block "<!-- figures: benchmarks/results/NAME output -->" then shows it
# (benchmarks/figures.py writes and checks such blocks; tests/figures_test.sh runs the
# check). Fails, keeping nothing, when COMMAND fails.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
[ "${1:-}" = --help ] || [ "${1:-}" = -h ] && { usage; exit 0; }
[ $# -ge 3 ] && [ "$2" = -- ] || { echo "record.sh: usage: record.sh NAME -- COMMAND [ARGS...] (see --help)" >&2; exit 2; }
name=$1; shift 2
[[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "record.sh: NAME '$name' may hold letters, digits, '.', '_' and '-' only" >&2; exit 2; }
dir=$here/benchmarks/results/$name
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
"$@" | tee "$tmp/output.txt"
mkdir -p "$dir"
mv "$tmp/output.txt" "$dir/output.txt"
python3 "$here/benchmarks/stamp.py" "$dir" output "$*"
echo "record.sh: kept in ${dir#$here/}" >&2
