#!/usr/bin/env bash
# Every measured figure block in the docs is what its recorded run gives
# (benchmarks/figures.py): a table edited by hand, or a run recorded again without
# regenerating the docs, fails here.
set -euo pipefail
root=$1
cd "$root"
docs=(README.md benchmarks/RESULTS.md docs/*.md)
python3 benchmarks/figures.py "${docs[@]}"
# A recorded run no document shows is a figure measured and lost.
for d in benchmarks/results/*/; do
  [ -e "$d/run.json" ] || continue
  name=${d%/}
  grep -q -- "<!-- figures: $name[ >]" "${docs[@]}" || { echo "FAIL: $name is recorded but no document shows it"; exit 1; }
done
