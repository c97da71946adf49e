#!/usr/bin/env bash
# The library as others use it: installed (headers, liboptcast, optcast.pc) into a
# staging root, then (1) hello built with g++ and pkg-config, (2) the demo built the same
# way with the command-line helper beside it (examples/cli.hpp), so it needs nothing but
# the installed headers, (3) a Meson project with dependency('optcast') through pkg-config, (4) a
# Meson project with optcast as a subproject, (5) a CMake project with
# find_package(optcast) and the imported target optcast::optcast, (6) the torch module,
# when built, in a directory the system's Python searches, registering its backend
# when imported from there. Each hello is run
# with --np 3 and must greet from all three ranks; the demo must verify its bytes on three ranks.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it

check() {  # program output -> three greetings
  local n
  n=$(grep -c 'got: hello from rank 0 of 3' <<<"$1" || true)
  [ "$n" = 3 ] || { echo "expected 3 greetings, got:"; echo "$1"; exit 1; }
}

DESTDIR="$tmp/root" meson install -C "$build" --no-rebuild --quiet
pc=$(find "$tmp/root" -name optcast.pc | head -1)
lib=$(find "$tmp/root" -name 'liboptcast.so' | head -1)
header=$(find "$tmp/root" -path '*/include/optcast/optcast.hpp' | head -1)
[ -n "$pc" ] && [ -n "$lib" ] && [ -n "$header" ] || { echo "install is missing optcast.pc, liboptcast.so or the headers"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR="$tmp/root"
export LD_LIBRARY_PATH=$(dirname "$lib")

echo "== g++ with pkg-config"
g++ -std=c++20 "$src/examples/hello.cpp" $(pkg-config --cflags --libs optcast) -o "$tmp/hello"
check "$("$tmp/hello" --np 3)"

echo "== the demo with pkg-config"
flags=$(pkg-config --cflags --libs optcast CLI11)
g++ -std=c++20 -I"$src/examples" "$src/examples/broadcast_demo.cpp" $flags -o "$tmp/demo"
out=$("$tmp/demo" --np 3 --bytes 64KiB --iterations 1)
grep -q 'every byte verified on all 3 ranks' <<<"$out" || { echo "the demo did not verify:"; echo "$out"; exit 1; }

echo "== Meson project, dependency('optcast')"
mkdir -p "$tmp/proj"
cp "$src/examples/hello.cpp" "$tmp/proj/"
cat > "$tmp/proj/meson.build" <<'M'
project('consumer', 'cpp', default_options : ['cpp_std=c++20'])
executable('hello', 'hello.cpp', dependencies : dependency('optcast'))
M
meson setup "$tmp/proj/b" "$tmp/proj" >/dev/null
ninja -C "$tmp/proj/b" >/dev/null
check "$("$tmp/proj/b/hello" --np 3)"

echo "== CMake project, find_package(optcast)"
command -v cmake >/dev/null || { echo "cmake not found (Debian: apt install cmake)"; exit 1; }
cfg=$(find "$tmp/root" -name optcastConfig.cmake | head -1)
[ -n "$cfg" ] || { echo "install is missing optcastConfig.cmake"; exit 1; }
mkdir -p "$tmp/cm"
cp "$src/examples/hello.cpp" "$tmp/cm/"
cat > "$tmp/cm/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.16)
project(consumer CXX)
find_package(optcast 0.1 REQUIRED)
add_executable(hello hello.cpp)
target_link_libraries(hello PRIVATE optcast::optcast)
C
# Found through the install prefix alone, as a user's CMAKE_PREFIX_PATH would (CMake
# searches PREFIX/lib/<multiarch>/cmake/optcast itself).
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/root$prefix" >/dev/null
cmake --build "$tmp/cm/b" >/dev/null
check "$("$tmp/cm/b/hello" --np 3)"
# A version the package does not offer is refused.
cat > "$tmp/cm/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.16)
project(consumer CXX)
find_package(optcast 1.0 REQUIRED)
C
if cmake -S "$tmp/cm" -B "$tmp/cm/b2" -DCMAKE_PREFIX_PATH="$tmp/root$prefix" >/dev/null 2>&1; then
  echo "find_package(optcast 1.0) should fail against version 0.1"; exit 1
fi

mod=$(find "$tmp/root" -name 'optcast_torch*.so' | head -1)
if [ -n "$mod" ]; then
  echo "== the torch module, where the system's Python looks under the prefix"
  dir=$(dirname "${mod#"$tmp/root"}")
  # The prefix's site directory must be on /usr/bin/python3's path (for prefix /usr/local
  # on Debian: /usr/local/lib/python3.X/dist-packages); a prefix Python does not search
  # (a staging prefix of the user's) is theirs to put on PYTHONPATH.
  case "$prefix" in
    /usr/local)
      /usr/bin/python3 -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "$dir" ||
        { echo "optcast_torch installs into $dir, which /usr/bin/python3 does not search"; exit 1; } ;;
  esac
  out=$(cd "$tmp" && PYTHONPATH="$(dirname "$mod")" /usr/bin/python3 -c 'import torch.distributed as dist, optcast_torch; print(dist.Backend.OPTCAST)')
  [ "${out,,}" = optcast ] || { echo "the installed optcast_torch did not register its backend: $out"; exit 1; }
fi

echo "== Meson subproject"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR LD_LIBRARY_PATH
mkdir -p "$tmp/sub/subprojects"
cp "$src/examples/hello.cpp" "$tmp/sub/"
ln -s "$src" "$tmp/sub/subprojects/optcast"
# What this checks is that optcast builds, links and is found as a subproject; the main
# build has compiled every file on its own already. So: buildtype plain (no debug
# information), the subproject's library as one unity unit, and only the target hello
# needs (not the optcast tool): 47 s of CPU on one core here (2026-12-07), against 86 s
# over both at 8 files a unit, 66 at 24 (this test runs beside others: its CPU is theirs
# too). So the library's files must build as one unit: two helpers of one name in the
# same namespace, each in its own file's anonymous namespace, fail here.
cat > "$tmp/sub/meson.build" <<'M'
project('consumer', 'cpp', default_options : ['cpp_std=c++20', 'buildtype=plain', 'unity=subprojects', 'unity_size=1000'])
subproject('optcast', default_options : ['tests=false', 'examples=false', 'ofi=disabled', 'torch=disabled'])
executable('hello', 'hello.cpp', dependencies : dependency('optcast'))
M
meson setup "$tmp/sub/b" "$tmp/sub" >/dev/null
ninja -C "$tmp/sub/b" hello >"$tmp/sub.log" 2>&1 || { tail -40 "$tmp/sub.log"; exit 1; }
check "$("$tmp/sub/b/hello" --np 3)"
echo "install test passed"
