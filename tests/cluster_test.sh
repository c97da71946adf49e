#!/usr/bin/env bash
# Jobs of 8 ranks, one per emulated host (tests/cluster/netns.sh: a network namespace
# each, IPv4 and IPv6, names in /etc/hosts), started the ways users start them; each
# rank runs tests/cluster_rank (a broadcast, an allreduce and a scatter, every element
# checked) and the job must end with every rank "ok" at its own host's address:
#   env       OPTCAST_RANK/OPTCAST_SIZE/OPTCAST_STORE=h0:port (a host name)
#   torchrun  RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
#   file      OPTCAST_STORE=file:///dir (one directory all hosts see)
#   redis     OPTCAST_STORE=redis://h0:port/prefix, a redis-server on h0
#   ipv6      the store at [fd97::1], OPTCAST_FAMILY=6
#   mpirun    Open MPI's mpirun (PMIx; no store), through an rsh agent into the namespaces
#   slurm     srun -N 8 -n 8 under a real slurmctld (on h0) and a slurmd per host
#   debian    h0's own name means 127.0.1.1 on h0 (Debian's /etc/hosts)
# and the setups that cannot work must give every rank an error, within the bootstrap
# timeout, that says why: a store nobody serves, a rank missing, sizes that disagree,
# an interface that does not exist, a stale file store, a loopback address advertised
# to other hosts, two jobs on one file store (they must not mix: both succeed), two jobs
# sent to one TCP store (the second is refused, the first undisturbed).
#
#   tests/cluster_test.sh CLUSTER_RANK [CASE...]     (root; exit 77 where it cannot run)
set -uo pipefail
RANK_BIN=${1:?usage: cluster_test.sh path/to/cluster_rank [case...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
NS="$here/cluster/netns.sh"
N=8
TAG="oc$$"
bash "$NS" can "$TAG" || exit $?

work=$(mktemp -d)
redis_pid=
slurm_up=
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2> /dev/null
  [ -n "$slurm_up" ] && bash "$here/cluster/slurm.sh" down "$work/slurm"
  bash "$NS" down "$TAG"
  [ -n "${KEEP_WORK:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
bash "$NS" up "$TAG" "$N" || { echo "FAIL: cannot set up $N emulated hosts"; exit 1; }

failures=0
skipped=()
port=29600
fail() { echo "FAIL [$case]: $*"; failures=$((failures + 1)); }

# run_job NAME VARS_FN: starts rank r on host r with the variables `VARS_FN r` prints
# (one VAR=value per line; "-": this rank is not started), waits (each rank up to 60 s),
# leaves outputs in $work/NAME.r.{out,err,rc}. run_job_on FIRST ...: rank r on host FIRST + r.
run_job() { run_job_on 0 "$@"; }
run_job_on() {
  local first=$1 name=$2 vars_fn=$3 pids=() r
  for r in $(seq 0 $((N - 1))); do
    mapfile -t vars < <($vars_fn "$r")
    [ "${vars[0]:-}" = "-" ] && continue
    (bash "$NS" exec "$TAG" $((first + r)) env OPTCAST_BOOTSTRAP_TIMEOUT=8 OPTCAST_TIMEOUT=20 "${vars[@]}" \
        timeout 60 "$RANK_BIN" > "$work/$name.$r.out" 2> "$work/$name.$r.err"
     echo $? > "$work/$name.$r.rc") &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

# every rank ok, each at its own host's address (family 4 or 6)
expect_ok() {
  local name=$1 fam=${2:-4} r
  for r in $(seq 0 $((N - 1))); do
    local want
    want="rank $r of $N ok at $( [ "$fam" = 6 ] && echo "[$(bash "$NS" addr "$r" 6)]" || bash "$NS" addr "$r")"
    if [ "$(cat "$work/$name.$r.rc" 2> /dev/null)" != 0 ] || ! grep -qF "$want:" "$work/$name.$r.out"; then
      fail "rank $r: wanted '$want:...', got rc $(cat "$work/$name.$r.rc" 2> /dev/null): $(cat "$work/$name.$r.out" "$work/$name.$r.err" 2> /dev/null | tail -3)"
    fi
  done
}

# every started rank failed (not killed by the deadline: rc 124), saying `pattern`
expect_error() {
  local name=$1 pattern=$2 r rc
  for r in $(seq 0 $((N - 1))); do
    [ -f "$work/$name.$r.rc" ] || continue
    rc=$(cat "$work/$name.$r.rc")
    if [ "$rc" = 0 ] || [ "$rc" = 124 ] || ! grep -qE "$pattern" "$work/$name.$r.err"; then
      fail "rank $r: wanted an error matching '$pattern', got rc $rc: $(tail -2 "$work/$name.$r.err")"
    fi
  done
}

# a launcher's run (its exit status $2, its ranks' lines in $work/$1.out): every rank ok
# at its own host's address
expect_launched() {
  local name=$1 rc=$2 r
  [ "$rc" = 0 ] || fail "$name exited with $rc: $(tail -5 "$work/$name.err")"
  for r in $(seq 0 $((N - 1))); do
    grep -qF "rank $r of $N ok at $(bash "$NS" addr "$r"):" "$work/$name.out" ||
      fail "rank $r did not report ok at its host's address: $(head -3 "$work/$name.out")"
  done
}

store_vars() { echo OPTCAST_RANK="$1"; echo OPTCAST_SIZE=$N; echo OPTCAST_STORE="h0:$port"; echo OPTCAST_JOB_ID=$((7000 + port)); }
torch_vars() { echo RANK="$1"; echo WORLD_SIZE=$N; echo LOCAL_RANK=0; echo MASTER_ADDR=h0; echo MASTER_PORT=$port; }
file_vars() { echo OPTCAST_RANK="$1"; echo OPTCAST_SIZE=$N; echo OPTCAST_STORE="file://$work/store"; echo OPTCAST_JOB_ID=$job_id; }
redis_vars() { echo OPTCAST_RANK="$1"; echo OPTCAST_SIZE=$N; echo OPTCAST_STORE="redis://h0:6390/cluster-test"; echo OPTCAST_JOB_ID=31; }
v6_vars() { echo OPTCAST_RANK="$1"; echo OPTCAST_SIZE=$N; echo OPTCAST_STORE="tcp://[fd97::1]:$port"; echo OPTCAST_FAMILY=6; }
no_rank0() { [ "$1" = 0 ] && echo - || store_vars "$1"; }
no_rank7() { [ "$1" = 7 ] && echo - || store_vars "$1"; }
odd_size() { store_vars "$1" | sed "s/^OPTCAST_SIZE=.*/OPTCAST_SIZE=$([ "$1" = 3 ] && echo 7 || echo $N)/"; }
bad_if() { store_vars "$1"; echo OPTCAST_IFNAME=nosuch0; }
loop_host() { store_vars "$1"; [ "$1" = 0 ] && echo OPTCAST_HOST=h0; }

# Slurm's daemons for the slurm case (tests/cluster/slurm.sh), in $work/slurm.
start_slurm() {
  slurm_up=1
  bash "$here/cluster/slurm.sh" up "$work/slurm" "bash $NS exec $TAG {}" $(for r in $(seq 0 $((N - 1))); do bash "$NS" addr "$r"; done)
}

# h0's own name means 127.0.1.1 there, as Debian's installer writes it.
debian_h0() { grep -q 127.0.1.1 "/etc/netns/$TAG-h0/hosts" || sed -i "1i 127.0.1.1 h0" "/etc/netns/$TAG-h0/hosts"; }

cases=("$@")
[ ${#cases[@]} = 0 ] && cases=(env torchrun file redis ipv6 mpirun slurm debian unreachable missing sizes ifname stale loopback twojobs twostores)
for case in "${cases[@]}"; do
  port=$((port + 1))
  start=$(date +%s%N)
  case $case in
    env) run_job env store_vars; expect_ok env ;;
    torchrun) run_job torchrun torch_vars; expect_ok torchrun ;;
    file) job_id=41; run_job file file_vars; expect_ok file ;;
    redis)
      if ! command -v redis-server > /dev/null; then skipped+=("redis: redis-server is not installed"); continue; fi
      bash "$NS" exec "$TAG" 0 redis-server --port 6390 --bind 0.0.0.0 --protected-mode no --save "" --appendonly no \
        --logfile "$work/redis.log" --dir "$work" &
      redis_pid=$!
      disown "$redis_pid"
      run_job redis redis_vars; expect_ok redis
      keys=$(bash "$NS" exec "$TAG" 0 redis-cli -p 6390 --scan --pattern 'cluster-test/job-31/*' | wc -l)
      [ "$keys" -ge $((2 * N)) ] || fail "the Redis store holds $keys keys under cluster-test/job-31/"
      ;;
    ipv6) run_job ipv6 v6_vars; expect_ok ipv6 6 ;;
    mpirun)
      # Open MPI's mpirun as the launcher only (no MPI in the program): started on h0, it
      # reaches the other hosts through an rsh agent that enters their namespaces; the
      # ranks learn their place from its PMIx server and publish through it (no store).
      if ! command -v mpirun > /dev/null; then skipped+=("mpirun: mpirun is not installed (Debian: openmpi-bin)"); continue; fi
      env OPTCAST_BOOTSTRAP_TIMEOUT=8 OPTCAST_TIMEOUT=20 OPTCAST_LOG=info timeout 100 \
        bash "$here/cluster/mpirun.sh" "bash $NS exec $TAG {}" "$work/mpirun" 10.97.0.0/24 $N -- "$RANK_BIN" \
        > "$work/mpirun.out" 2> "$work/mpirun.err"
      rc=$?
      grep "^mpirun.sh:" "$work/mpirun.err"
      expect_launched mpirun $rc
      ;;
    slurm)
      # A real Slurm: slurmctld on h0, a slurmd on every host (each in its namespace, with
      # its host's name), munge for their credentials, and srun -N 8 -n 8 on h0.
      if ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
        skipped+=("slurm: slurmctld or munged is not installed (Debian: slurm-wlm, munge)"); continue
      fi
      start_slurm || { fail "cannot start Slurm: $(tail -3 "$work"/slurm/*.log 2> /dev/null)"; continue; }
      bash "$NS" exec "$TAG" 0 env SLURM_CONF="$work/slurm/slurm.conf" OPTCAST_BOOTSTRAP_TIMEOUT=8 OPTCAST_TIMEOUT=20 \
        timeout 120 srun -N $N -n $N "$RANK_BIN" > "$work/slurm.out" 2> "$work/slurm.err"
      expect_launched slurm $?
      ;;
    debian)
      debian_h0
      run_job debian store_vars; expect_ok debian
      ;;
    unreachable) run_job unreachable no_rank0; expect_error unreachable "store" ;;
    missing) run_job missing no_rank7; expect_error missing "rank 7 did not join the job within 8000 ms" ;;
    sizes) run_job sizes odd_size; expect_error sizes "rank 3 expects a job of 7 ranks, this store serves 8" ;;
    ifname) run_job ifname bad_if; expect_error ifname "nosuch0.*eth0" ;;
    stale)
      # The same job id again in the same directory: an earlier job's keys are there.
      job_id=61; run_job stale0 file_vars; expect_ok stale0
      run_job stale file_vars; expect_error stale "already served a job"
      ;;
    loopback) debian_h0; run_job loopback loop_host; expect_error loopback "rank 0 advertises 127.0.1.1:[0-9]+, a loopback address" ;;
    twojobs)
      # Two jobs of 4 at once in one directory: each its own id, neither sees the other's.
      N=4
      job_id=51; run_job twoA file_vars &
      a=$!
      job_id=52; run_job twoB file_vars
      wait $a
      expect_ok twoA
      N=8
      for r in 0 1 2 3; do
        [ "$(cat "$work/twoB.$r.rc")" = 0 ] || fail "job B rank $r: $(tail -2 "$work/twoB.$r.err")"
      done
      ;;
    twostores)
      # Two jobs of 4 sent to one TCP store (h0's). Job A's rank 3 starts last, so that its
      # store is there (waiting for it) while job B's ranks, on h4..h7, try to join: they
      # are refused, saying so; then job A runs undisturbed.
      N=4
      job_a_first() { [ "$1" = 3 ] && echo - || store_vars "$1"; }
      job_a_last() { [ "$1" = 3 ] && store_vars "$1" || echo -; }
      job_b() { echo OPTCAST_RANK="$1"; echo OPTCAST_SIZE=4; echo OPTCAST_STORE="h0:$port"; echo OPTCAST_JOB_ID=72; }
      run_job twoA job_a_first &
      a=$!
      sleep 0.3
      run_job_on 4 twoB job_b
      run_job twoA job_a_last
      wait $a
      expect_ok twoA
      for r in 0 1 2 3; do
        grep -q "belongs to job 72, and this store serves another" "$work/twoB.$r.err" ||
          fail "job B rank $r: $(cat "$work/twoB.$r.rc") $(tail -2 "$work/twoB.$r.err")"
      done
      N=8
      ;;
    *) echo "cluster_test: no case '$case'" >&2; exit 2 ;;
  esac
  echo "$case: $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
if [ $failures != 0 ]; then echo "$failures failures"; exit 1; fi
# A case that could not run makes the whole test skipped, with its reasons, never green.
if [ ${#skipped[@]} != 0 ]; then echo "skipped: ${skipped[*]}"; exit 77; fi
echo "all cases passed"
