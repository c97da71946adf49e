#!/usr/bin/env bash
# Bad sizes on every program's command line are refused while it is read: exit status 2,
# the option named with why, and no rank started (no abort, no signal, no launcher line).
# A size a machine cannot hold is refused the same way, before any rank allocates it.
set -uo pipefail
demo=$1 bench=$2 tool=$3
fails=0
expect_refusal() {  # WORDS COMMAND...
  local words=$1
  shift
  local err status
  err=$("$@" 2>&1 >/dev/null)
  status=$?
  if [ "$status" != 2 ] || ! grep -qF -- "$words" <<<"$err" || grep -qE 'terminate called|signal|optcast launcher' <<<"$err"; then
    echo "FAIL: $* -> status $status, expected 2 and '$words':"
    echo "$err" | head -5
    fails=$((fails + 1))
  fi
}
expect_refusal "a size cannot be negative: -5" "$demo" --np 3 --bytes=-5
expect_refusal "is more than this machine's memory" "$demo" --np 3 --bytes 100PiB
expect_refusal "need more than its memory" "$demo" --np 4096 --bytes 1GiB
expect_refusal "unit not recognized" "$demo" --np 2 --bytes 10Q
expect_refusal "a size cannot be negative: -5" "$bench" coll --np 2 -l -5
expect_refusal "a size cannot be negative" "$bench" coll --np 2 -l 8,-1000
expect_refusal "must not exceed --max-bytes" "$bench" coll --np 2 -s 1MiB -S 1KiB
expect_refusal "is more than this machine's memory" "$bench" broadcast --np 2 --fabric tcp --sizes 100PiB
expect_refusal "a size cannot be negative" "$bench" p2p --bytes=-1
expect_refusal "p2p runs its two ranks in this process" "$bench" p2p --np 2
expect_refusal "--frames: Value 0 not in range" "$bench" flood --np 2 --frames 0
expect_refusal "--np: Value 1 not in range" "$bench" flood --np 1
expect_refusal "is none of file:///DIR, redis://HOST:PORT, launcher" "$bench" chaos --store http://x
expect_refusal "store launcher goes with --shrink" "$bench" chaos --store launcher
expect_refusal "is not a rank that may die here" "$bench" chaos --shrink --np 4 --victim 0
expect_refusal "--second-kill goes with --shrink" "$bench" chaos --second-kill
expect_refusal "--shrink needs a fault" "$bench" chaos --shrink --mode none
expect_refusal "leave too few survivors" "$bench" chaos --shrink --second-kill --np 3
# ...and its help does not tell the user to start it with the option it refuses.
p2p_help=$("$bench" p2p --help) || { echo "FAIL: p2p --help exits $?"; fails=$((fails + 1)); }
grep -q -- "--fabric" <<<"$p2p_help" || { echo "FAIL: p2p's help does not name --fabric"; fails=$((fails + 1)); }
if grep -q -- "--np" <<<"$p2p_help"; then echo "FAIL: p2p's help names --np"; fails=$((fails + 1)); fi
expect_refusal "a size cannot be negative" "$tool" simulate --collective broadcast --p 4 --bytes=-3
expect_refusal "is more than the largest size allowed" "$tool" calibrate --fabric sim --big 2GiB
expect_refusal "is less than the smallest size allowed" "$tool" calibrate --fabric sim --big 1
expect_refusal "a size cannot be negative" "$bench" percall --sizes 8,-1
expect_refusal "--p: Value 1 not in range" "$bench" percall --p 1
expect_refusal "a size cannot be negative" "$tool" pingpong --bytes 8,-1
expect_refusal "is more than the largest size allowed" "$tool" pingpong --bytes 1GiB
# And the good ones still run.
"$demo" --np 2 --bytes 64KiB --iterations 1 >/dev/null || { echo "FAIL: a good size was refused"; fails=$((fails + 1)); }
"$bench" percall --p 3 --sizes 8,1000 --calls 20 --reps 1 >/dev/null || { echo "FAIL: percall's results or run failed"; fails=$((fails + 1)); }
[ "$fails" = 0 ] || exit 1
echo "every bad size refused with its reason"
