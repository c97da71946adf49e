#!/usr/bin/env bash
# The fuzzing benchmark: builds the libFuzzer targets (clang, ASan; UBSan on the targets)
# and runs each for N inputs from its seed corpus; prints inputs, seconds, inputs/s,
# corpus growth and crashes per target (JSON with --json). A crash's input is copied
# into tests/fuzz/crashes/, where the replay tests of the suite run it from then on.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

runs=10000000
build="$root/build-fuzz"
json=false
# The targets as tests/fuzz/meson.build lists them.
targets=($(sed -n "s/^fuzz_targets = \[\(.*\)\]/\1/p" "$here/meson.build" | tr -d "',"))
[ ${#targets[@]} -gt 0 ] || { echo "bench.sh: no fuzz_targets in $here/meson.build" >&2; exit 1; }
usage() {
  cat <<EOF
usage: tests/fuzz/bench.sh [--runs N] [--build DIR] [--target NAME]... [--json]

Fuzzes the decoders and judgements of everything optcast reads from the wire:
  tcp_hello      the TCP handshake as the accepting rank judges it
  tcp_frame      TCP frame headers, abort texts, the unexpected-message budget check
  store_stream   the store's message stream (before and after the handshake)
  store_session  the store's whole protocol: hellos, joins, messages, departures
  auth_frame     proofs and encrypted frames from a party without the key
  control        the survival layer's revocations, agreements and admissions from a member
Each target runs N inputs (default 10^7, libFuzzer -runs, seed 1) from a copy of its
seed corpus (tests/fuzz/corpus/TARGET). Needs clang++ and libclang-rt-14-dev (installed
with apt when missing and run as root). Exit status: 0 with no crash, 1 with any.

  --runs N       inputs per target (default $runs)
  --build DIR    the clang build directory (default build-fuzz)
  --target NAME  only this target (repeatable)
  --json         one JSON object on stdout instead of the table
EOF
}
chosen=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --target) chosen+=("$2"); shift 2 ;;
    --json) json=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#chosen[@]} -gt 0 ] && targets=("${chosen[@]}")
case "$runs" in ''|*[!0-9]*) echo "bench.sh: --runs needs a number, not '$runs'" >&2; exit 2 ;; esac
for t in "${targets[@]}"; do
  [ -d "$here/corpus/$t" ] || { echo "bench.sh: no target '$t' (see --help)" >&2; exit 2; }
done

say() { if $json; then echo "$@" >&2; else echo "$@"; fi; }

rt=$(ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a 2>/dev/null | head -1 || true)
if ! command -v clang++ >/dev/null || [ -z "$rt" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing clang and libclang-rt-14-dev"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev >&2
  else
    echo "bench.sh: needs clang++ and libFuzzer (apt install clang libclang-rt-14-dev)" >&2
    exit 77
  fi
fi

if [ ! -f "$build/build.ninja" ]; then
  say "configuring $build (clang, libFuzzer, ASan)"
  CXX=clang++ meson setup "$build" "$root" -Dfuzz=true -Dtests=false -Dexamples=false \
    -Db_sanitize=address -Db_lundef=false -Dbuildtype=release >&2
fi
ninja -C "$build" $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}") >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
rows=()
crashed=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "$work/$t-art"
  cp "$here/corpus/$t"/* "$work/$t/"
  seeds=$(ls "$work/$t" | wc -l)
  say "fuzzing $t: $runs inputs"
  start=$(date +%s.%N)
  set +e
  "$build/tests/fuzz/fuzz_$t" -runs="$runs" -seed=1 -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$work/$t-art/" "$work/$t" > "$work/$t.log" 2>&1
  status=$?
  set -e
  end=$(date +%s.%N)
  done_runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$work/$t.log" | tail -1)
  [ -n "$done_runs" ] || done_runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$work/$t.log" | tail -1)
  crashes=$(ls "$work/$t-art" | wc -l)
  if [ "$status" != 0 ] && [ "$crashes" = 0 ]; then crashes=1; fi
  for f in "$work/$t-art"/*; do
    [ -e "$f" ] || continue
    cp "$f" "$here/crashes/$t-$(basename "$f")"
    say "  crash: tests/fuzz/crashes/$t-$(basename "$f")"
    grep -E "violated|ERROR|SUMMARY" "$work/$t.log" | head -3 >&2 || true
  done
  [ "$crashes" = 0 ] || crashed=1
  corpus=$(ls "$work/$t" | wc -l)
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  rate=$(awk -v n="${done_runs:-0}" -v s="$secs" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')
  rows+=("$t ${done_runs:-0} $secs $rate $seeds $corpus $crashes")
done

if $json; then
  printf '{"runs_per_target": %s, "targets": [' "$runs"
  sep=""
  for r in "${rows[@]}"; do
    read -r t n s rate seeds corpus crashes <<<"$r"
    printf '%s{"target": "%s", "inputs": %s, "seconds": %s, "inputs_per_second": %s, "seeds": %s, "corpus": %s, "crashes": %s}' \
      "$sep" "$t" "$n" "$s" "$rate" "$seeds" "$corpus" "$crashes"
    sep=", "
  done
  printf ']}\n'
else
  printf '%-14s %12s %9s %10s %7s %7s %8s\n' target inputs seconds inputs/s seeds corpus crashes
  for r in "${rows[@]}"; do
    read -r t n s rate seeds corpus crashes <<<"$r"
    printf '%-14s %12s %9s %10s %7s %7s %8s\n' "$t" "$n" "$s" "$rate" "$seeds" "$corpus" "$crashes"
  done
fi
exit $crashed
