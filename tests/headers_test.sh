#!/usr/bin/env bash
# Every public header compiles on its own (includes what it uses).
set -euo pipefail
inc="$1/include"
cxx=${CXX:-c++}
fails=0
for h in $(cd "$inc" && find optcast -name '*.hpp' | sort); do
  if ! echo "#include <$h>" | $cxx -std=c++20 -fsyntax-only -Wall -Wextra -I"$inc" -x c++ - 2>/tmp/optcast-header-$$.txt; then
    echo "== $h does not compile on its own:"; cat /tmp/optcast-header-$$.txt; fails=1
  fi
done
rm -f /tmp/optcast-header-$$.txt
[ $fails = 0 ] && echo "every header compiles on its own"
exit $fails
