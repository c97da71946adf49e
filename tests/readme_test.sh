#!/usr/bin/env bash
# README's algorithm table is what the registry says (optcast simulate --list --markdown).
set -euo pipefail
readme="$1/README.md"
tool="$2"
want=$("$tool" simulate --list --markdown)
have=$(awk '/^<!-- registry table:/{on=1; next} /^<!-- end of registry table -->/{on=0} on' "$readme")
if [ "$want" != "$have" ]; then
  echo "README.md's algorithm table differs from the registry; regenerate it with: optcast simulate --list --markdown"
  diff <(echo "$have") <(echo "$want") || true
  exit 1
fi
echo "README's algorithm table matches the registry ($(echo "$want" | tail -n +3 | wc -l) rows)"
