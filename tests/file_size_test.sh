#!/usr/bin/env bash
# A source file holds one idea: none passes 500 lines. A file over it fails this test
# unless listed below with the reason; a listed file that has come under the limit must
# leave the list.
set -euo pipefail
root=$1
limit=500
# file: why it is still over the limit (none now; a file that must stay over it says why here)
over_allowed=()
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
