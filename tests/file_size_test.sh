#!/usr/bin/env bash
# A source file holds one idea: none passes 500 lines. The files still over it are
# listed below, each to be split by idea (issue 44); the list only shrinks: a listed file
# that has come under the limit must leave the list, and a file not on it that passes
# the limit fails this test.
set -euo pipefail
root=$1
limit=500
# file: why it is still over the limit
over_allowed=(
  "bindings/torch/process_group.cpp"       # store adapter, dtype map, composed calls, the group: to split
  "tests/trust_test.cpp"                   # the TCP fabric's trust and the store's: to split
  "tests/collectives_test.cpp"             # one subject, 13 lines over
  "tests/fabric_conformance_test.cpp"      # one subject, 6 lines over
)
cd "$root"
fails=0
while IFS= read -r f; do
  n=$(wc -l <"$f")
  allowed=0
  for a in "${over_allowed[@]}"; do [ "$a" = "$f" ] && allowed=1; done
  if [ "$n" -gt "$limit" ] && [ "$allowed" = 0 ]; then
    echo "FAIL: $f has $n lines, more than $limit: split it by idea"
    fails=$((fails + 1))
  fi
  if [ "$n" -le "$limit" ] && [ "$allowed" = 1 ]; then
    echo "FAIL: $f has come under $limit lines ($n): take it off this test's list"
    fails=$((fails + 1))
  fi
done < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.py' '*.sh' 2>/dev/null || find . -path ./build -prune -o \( -name '*.cpp' -o -name '*.hpp' -o -name '*.py' -o -name '*.sh' \) -print | sed 's|^\./||')
[ "$fails" = 0 ] || exit 1
echo "every source file within $limit lines but the ${#over_allowed[@]} listed"
