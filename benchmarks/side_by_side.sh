#!/usr/bin/env bash
# optcast beside Open MPI and Gloo on emulated hosts (or on this host alone), in one sitting
# or several.
#
#   benchmarks/side_by_side.sh [options]        as root, from the repository
#
# Builds the peers' benchmarks (../shared/bench/: mpi_coll_bench.c, gloo_coll_bench.cpp),
# brings up HOSTS network namespaces with full-duplex RATE links (netcluster.sh), runs
# optcast-bench coll, Open MPI and Gloo with one rank per host, interleaved (optcast,
# MPI, Gloo, then optcast again so drift shows; with several ranks per host or several
# rails, Open MPI also with coll/han), brings the cluster down, and prints one
# table: each library's median, the bandwidth bound, and optcast's ratios to the bound
# and to the best peer (benchmarks/table.py). Every run checks its results on every rank.
# With --hosts 1 there are no namespaces: PPN ranks on this host, each library with its
# shared memory (optcast-bench coll --np, mpirun --mca btl self,vader, Gloo on loopback).
#
# options:
#   --hosts N        emulated hosts (default 8); 1: this host alone
#   --sittings S     the whole alternation S times (default 1); the table then gives each
#                    library the median of its sittings' medians
#   --ppn N          ranks per host (default 1): shared memory between them for each library
#   --rails K        network interfaces per host (default 1), each a link of RATE: every
#                    library uses all (optcast's rails, Open MPI's TCP BTL; Gloo has one device)
#   --rate RATE      link rate per host and direction, netcluster.sh units (default 1gbit)
#   --sizes LIST     bytes, comma-separated (default 8,65536,1048576,16777216)
#   --ops LIST       bcast,scatter,gather,reduce,allreduce,allgather,barrier (default the first
#                    six); Open MPI's barrier is timed by benchmarks/peers/mpi_barrier_bench.c,
#                    Gloo's benchmark has none
#   --time S         seconds of repetitions per (op, size) and library (default 2)
#   --timing T       sync (default: every rank starts at an agreed instant, its wake-up timed
#                    too) or loop (a barrier, then --calls calls back to back, the slowest
#                    rank's time / calls: per-call costs that sync's wake-up hides), for all three
#   --calls K        calls per timed repetition with --timing loop (default 50)
#   --goodput MBIT   what one TCP flow carries on a link, for the bounds (default 95.4% of
#                    RATE, what iperf3 measures on netcluster.sh's 1gbit links)
#   --calibration F  optcast's cost model (OPTCAST_CALIBRATION) from file F; default: measure
#                    it first on the cluster (optcast calibrate, as docs/GUIDE.md tells users to),
#                    "none": the built-in defaults
#   --out DIR        keep the raw outputs there (default a temporary directory)
#   --record NAME    keep them, stamped, in benchmarks/results/NAME for the docs' generated
#                    tables (benchmarks/figures.py; "<!-- figures: benchmarks/results/NAME -->")
#   --keep-cluster   do not bring the cluster down (nor up, if one is up already)
#   --no-gloo        leave Gloo out (its ranks busy-poll without yielding: on a host with
#                    many more ranks than cores a sitting takes minutes)
#   --help
# Environment: SHARED (default ../shared from the repository), BENCH (optcast-bench,
# default build/examples/optcast-bench), OPTCAST_ARGS (more options for optcast-bench coll).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
hosts=8 ppn=1 rails=1 rate=1gbit sizes=8,65536,1048576,16777216 ops=bcast,scatter,gather,reduce,allreduce,allgather
budget=2 out="" keep=0 goodput="" calibration="" record="" timing=sync calls=50 sittings=1 gloo=1
command="benchmarks/side_by_side.sh $*"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --sittings) sittings=$2; shift 2 ;;
    --ppn) ppn=$2; shift 2 ;;
    --rails) rails=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --time) budget=$2; shift 2 ;;
    --timing) timing=$2; shift 2 ;;
    --calls) calls=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    --goodput) goodput=$2; shift 2 ;;
    --calibration) calibration=$2; shift 2 ;;
    --keep-cluster) keep=1; shift ;;
    --no-gloo) gloo=0; shift ;;
    --help|-h) usage; exit 0 ;;
    *) echo "side_by_side: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] || { echo "side_by_side: --hosts needs a number >= 1" >&2; exit 2; }
[[ $sittings =~ ^[0-9]+$ ]] && [ "$sittings" -ge 1 ] || { echo "side_by_side: --sittings needs a number >= 1" >&2; exit 2; }
local_only=0
[ "$hosts" = 1 ] && local_only=1
if [ $local_only = 1 ] && [ "$rails" != 1 ]; then echo "side_by_side: --rails needs --hosts 2 or more" >&2; exit 2; fi
[[ $ppn =~ ^[0-9]+$ ]] && [ "$ppn" -ge 1 ] || { echo "side_by_side: --ppn needs a number >= 1" >&2; exit 2; }
[[ $rails =~ ^[0-9]+$ ]] && [ "$rails" -ge 1 ] || { echo "side_by_side: --rails needs a number >= 1" >&2; exit 2; }
[ "$timing" = sync ] || [ "$timing" = loop ] || { echo "side_by_side: --timing is sync or loop" >&2; exit 2; }
[[ $calls =~ ^[0-9]+$ ]] && [ "$calls" -ge 1 ] || { echo "side_by_side: --calls needs a number >= 1" >&2; exit 2; }
# The same timing options for every library's benchmark (their -T and -K mean the same).
timing_args=(-T "$timing")
[ "$timing" = loop ] && timing_args+=(-K "$calls")
export PPN=$ppn
[ $local_only = 1 ] || [ "$(id -u)" = 0 ] || { echo "side_by_side: network namespaces need root" >&2; exit 2; }
SHARED=${SHARED:-$here/../shared}
NC=$SHARED/tools/netcluster.sh
PEERS=$SHARED/bench
BIN=${BENCH:-$here/build/examples/optcast-bench}
[ -f "$NC" ] && [ -f "$PEERS/mpi_coll_bench.c" ] || { echo "side_by_side: $SHARED lacks tools/netcluster.sh or bench/ (set SHARED)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "side_by_side: $BIN is not built (ninja -C build)" >&2; exit 2; }

missing=()
# openmpi-bin brings an mpicc without mpi.h: ask for the headers' package itself.
dpkg -s libopenmpi-dev >/dev/null 2>&1 || missing+=(libopenmpi-dev)
command -v mpicc >/dev/null || missing+=(openmpi-bin)
[ -f /usr/include/gloo/allreduce_ring.h ] || missing+=(libgloo-dev)
[ $local_only = 1 ] || command -v iperf3 >/dev/null || missing+=(iperf3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing the peers: ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi

if [ -n "$record" ]; then
  [[ $record =~ ^[A-Za-z0-9._-]+$ ]] || { echo "side_by_side: --record NAME may hold letters, digits, '.', '_' and '-' only" >&2; exit 2; }
  out=$here/benchmarks/results/$record
  # A record holds this run's files only: an earlier recording's (other sittings' names)
  # would be stamped with this run's command. The calibration it was told to reuse stays.
  if [ -d "$out" ]; then
    kept=/
    if [ -n "$calibration" ] && [ "$calibration" != none ] && [ "$(realpath -m "$calibration")" = "$(realpath -m "$out/calibration.json")" ]; then
      kept=calibration.json
    fi
    find "$out" -mindepth 1 -maxdepth 1 ! -name "$kept" -exec rm -rf {} +
  fi
fi
[ -n "$out" ] || out=$(mktemp -d /tmp/side_by_side.XXXXXX)
mkdir -p "$out/bin"
echo "== building the peers' benchmarks into $out/bin" >&2
mpicc -O2 -o "$out/bin/mpi_coll_bench" "$PEERS/mpi_coll_bench.c"
mpicc -O2 -o "$out/bin/mpi_barrier_bench" "$here/benchmarks/peers/mpi_barrier_bench.c"
g++ -O2 -std=c++17 -o "$out/bin/gloo_coll_bench" "$PEERS/gloo_coll_bench.cpp" -lgloo -lpthread

brought_up=0
flow=""
if [ $local_only = 0 ]; then
  if ! bash "$NC" hosts 2>/dev/null | grep -q " h$((hosts - 1))$"; then
    echo "== netcluster.sh up $hosts $rate $rails" >&2
    bash "$NC" up "$hosts" "$rate" "$rails" >&2
    brought_up=1
  fi
fi
cleanup() { if [ $keep = 0 ] && [ $brought_up = 1 ]; then bash "$NC" down >&2 || true; fi; }
trap cleanup EXIT
trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 130' INT  # bash skips the EXIT trap when a signal kills it
if [ $local_only = 0 ]; then
  # What one TCP flow really carries on these links (iperf3, h1 -> h0), beside the bounds'
  # nominal goodput: no library can beat it on a root's single link (scatter, gather).
  flow=$(bash "$NC" exec h0 timeout 20 iperf3 -s -1 >/dev/null 2>&1 & sleep 1;
         bash "$NC" exec h1 timeout 15 iperf3 -c "$(bash "$NC" hosts | awk '$2 == "h0" {print $1}')" -t 3 -f m 2>/dev/null |
           awk '/receiver/ {print $(NF-2)}'; wait) || flow="?"
fi
if [ -z "$calibration" ] && [ $local_only = 1 ]; then
  calibration=none  # no links to measure: the model's defaults
elif [ -z "$calibration" ]; then
  echo "== optcast calibrate on the cluster" >&2
  calibration="$out/calibration.json"
  NETCLUSTER="$NC" bash "$here/examples/cluster_bench.sh" "$hosts" calibrate --output "$calibration" >"$out/calibrate.txt"
fi
cal_env=()
[ "$calibration" != none ] && cal_env=(OPTCAST_CALIBRATION="$calibration")
# optcast: one rank per host, the store on h0 (examples/cluster_bench.sh); or PPN ranks here.
run_optcast() {  # label
  if [ $local_only = 1 ]; then
    env "${cal_env[@]}" "$BIN" coll --np "$ppn" -L "$1" -l "$sizes" -o "$ops" -t "$budget" "${timing_args[@]}" ${OPTCAST_ARGS:-}
    return
  fi
  env "${cal_env[@]}" NETCLUSTER="$NC" BENCH="$BIN" bash "$here/examples/cluster_bench.sh" "$hosts" coll -L "$1" -l "$sizes" \
    -o "$ops" -t "$budget" "${timing_args[@]}" ${OPTCAST_ARGS:-}
}

# Each library spends about --time per (op, size): say how long each stage will take.
n_ops=$(tr ',' '\n' <<<"$ops" | grep -c .) n_sizes=$(tr ',' '\n' <<<"$sizes" | grep -c .)
stage() {  # step label ops
  # --time may be a fraction: the shell's arithmetic is integers only.
  echo "== [$1/$stages]$([ "$sittings" -gt 1 ] && echo " sitting $sitting of $sittings:") $2: $3 ops x $n_sizes sizes x $budget s, about $(awk -v a="$3" -v b="$n_sizes" -v c="$budget" 'BEGIN {printf "%.0f", a * b * c}') s  ($(date +%T))" >&2
}
# Open MPI's hierarchical collectives (coll/han, off by default) where there is a hierarchy.
han=0
if [ $local_only = 0 ] && { [ "$ppn" -gt 1 ] || [ "$rails" -gt 1 ]; }; then han=1; fi
stages=$((4 + han))
# The barrier is not the peers' benchmarks' (Open MPI's comes from our own program).
peer_ops=$(tr ',' '\n' <<<"$ops" | grep -vx barrier | paste -sd, -) || true
barrier=0
tr ',' '\n' <<<"$ops" | grep -qx barrier && barrier=1
# Open MPI across the namespaces, or PPN ranks here over its shared memory (vader).
mpi_launch() {  # [mpirun options] -- program args
  if [ $local_only = 0 ]; then
    bash "$PEERS/run_mpi_netns.sh" "$hosts" "$@"
    return
  fi
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  mpirun --allow-run-as-root --oversubscribe -np "$ppn" --mca btl self,vader "${opts[@]}" "$@"
}
run_mpi() {  # label output [mpirun options]
  local label=$1 file=$2
  shift 2
  : >"$file"
  if [ -n "$peer_ops" ]; then
    mpi_launch "$@" -- "$out/bin/mpi_coll_bench" -L "$label" -o "$peer_ops" -l "$sizes" -t "$budget" "${timing_args[@]}" \
      >>"$file" 2>"${file%.txt}.err" || { echo "side_by_side: Open MPI ($label) failed:" >&2; tail -5 "${file%.txt}.err" >&2; exit 1; }
  fi
  if [ $barrier = 1 ]; then
    mpi_launch "$@" -- "$out/bin/mpi_barrier_bench" -L "$label" -l "$sizes" -t "$budget" "${timing_args[@]}" \
      >>"$file" 2>>"${file%.txt}.err" || { echo "side_by_side: Open MPI's barrier ($label) failed:" >&2; tail -5 "${file%.txt}.err" >&2; exit 1; }
  fi
}
# Gloo's allreduce comes as ring, bcube and halving-doubling: all three run, the best counts.
gloo_ops=$(sed 's/\ballreduce\b/allreduce_ring,allreduce_bcube,allreduce_hd/' <<<"$peer_ops")
[ $gloo = 1 ] || gloo_ops=""
files=()
for sitting in $(seq 1 "$sittings"); do
  pre=""
  [ "$sittings" -gt 1 ] && pre="s$sitting."
  stage 1 "optcast (1 of 2)" "$n_ops"
  run_optcast optcast >"$out/${pre}optcast1.txt"
  stage 2 "Open MPI" "$n_ops"
  run_mpi mpi "$out/${pre}mpi.txt"
  files+=("${pre}optcast1.txt" "${pre}mpi.txt")
  if [ $han = 1 ]; then
    stage 3 "Open MPI with coll/han" "$n_ops"
    run_mpi mpi+han "$out/${pre}mpi_han.txt" --mca coll_han_priority 100
    files+=("${pre}mpi_han.txt")
  fi
  stage $((3 + han)) Gloo "$(tr ',' '\n' <<<"$gloo_ops" | grep -c .)"
  : >"$out/${pre}gloo.txt"
  if [ -n "$gloo_ops" ]; then
    GLOO_BENCH="$out/bin/gloo_coll_bench" bash "$PEERS/run_gloo.sh" "$([ $local_only = 1 ] && echo loopback || echo netns)" \
      "$([ $local_only = 1 ] && echo "$ppn" || echo "$hosts")" -L gloo -o "$gloo_ops" -l "$sizes" -t "$budget" "${timing_args[@]}" \
      >"$out/${pre}gloo.txt" 2>"$out/${pre}gloo.err" || { echo "side_by_side: Gloo failed:" >&2; tail -5 "$out/${pre}gloo.err" >&2; exit 1; }
  fi
  stage $((4 + han)) "optcast (2 of 2)" "$n_ops"
  run_optcast "optcast#2" >"$out/${pre}optcast2.txt"
  files+=("${pre}gloo.txt" "${pre}optcast2.txt")
done

[ -n "$goodput" ] || goodput=$(python3 -c "import re,sys; n,u=re.match(r'([0-9.]+)([a-z]*)',sys.argv[1].lower()).groups(); print(0.954*float(n)*{'gbit':1000,'mbit':1,'kbit':1e-3}.get(u,1e-6))" "$rate")
where="$hosts hosts x $ppn ranks x $rails rails at $rate (bounds at $goodput Mbit/s; one TCP flow measured ${flow:-?} Mbit/s by iperf3)"
[ $local_only = 1 ] && where="$ppn ranks on this host (no links: no bandwidth bound)"
echo "# $where, sizes $sizes, $budget s per (op, size) and library, timing $timing$([ "$timing" = loop ] && echo " (K=$calls)"), $sittings sitting(s), $(date -u +%F); optcast's model: ${calibration}; raw outputs in $out"
sitting_args=()
[ "$sittings" -gt 1 ] && sitting_args=(--sittings)
python3 "$here/benchmarks/table.py" --p "$hosts" --ppn "$ppn" --rails "$rails" --rate-mbit "$goodput" "${sitting_args[@]}" \
  "${files[@]/#/$out/}"
if [ -n "$record" ]; then
  rm -rf "$out/bin" "$out"/*.err
  [ "$calibration" = "$out/calibration.json" ] || rm -f "$out/calibration.json"
  python3 "$here/benchmarks/stamp.py" "$out" table "$command" files="$(IFS=,; echo "${files[*]}")" sittings="$sittings" \
    p="$hosts" ppn="$ppn" rails="$rails" rate_mbit="$goodput" flow_mbit="${flow:-?}" link="$rate"
  echo "side_by_side: recorded in benchmarks/results/$record (benchmarks/figures.py --write shows it where its blocks are)" >&2
fi
