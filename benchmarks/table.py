#!/usr/bin/env python3
"""One markdown table of optcast beside its peers, from the benchmarks' lines.

usage: table.py [--p 8] [--ppn 1] [--rails 1] [--rate-mbit 954] [--stat med|min] [--sizes LIST]
                [--ops LIST] FILE...

Each FILE holds lines "label op bytes reps min_us med_us max_us ok" (optcast-bench coll,
../shared/bench/mpi_coll_bench and gloo_coll_bench); other lines are ignored. A label
"name#2" is a second run of "name": optcast's two runs are shown as a range, and its
ratios use the slower one; with --sittings (the files of several sittings) every library
shows, and is compared by, the median of its runs. Gloo's allreduce variants (ring, bcube, halving-doubling)
count as one peer, its best (and so do Open MPI's runs with and without coll/han). The
bound is the time the bytes need on a host's k = --rails links of --rate-mbit (goodput B,
each direction) for H = --p hosts of n = --ppn ranks each (what crosses a host's links):
  bcast      m/(kB) (1 + (log2 H - 1)/64)   pipelined, 64 blocks
  reduce     m/(kB)                         every byte into the root's host once
  allreduce  2 (H-1)/H m/(kB)               reduce-scatter then allgather
  scatter, gather, allgather  (H-1) n m/(kB), m per rank
  alltoall   (H-1) n^2 m/(kB)
Below 256 KiB the links' token bucket (netcluster.sh: a burst of 70 kB at 1 Gbit/s) lets
messages through faster than the rate, so there is no bandwidth bound: the column says "—".
A FAIL anywhere is shown, and makes the exit status 1. The last column is the algorithm
and block count optcast's automatic choice took (its "# op bytes: alg, n = N" lines).
"""
import argparse
import collections
import math
import statistics
import re
import sys

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("files", nargs="+")
ap.add_argument("--p", type=int, default=8, help="hosts")
ap.add_argument("--ppn", type=int, default=1, help="ranks per host")
ap.add_argument("--rails", type=int, default=1, help="links per host")
ap.add_argument("--rate-mbit", type=float, default=954.0)
ap.add_argument("--stat", default="med", choices=["med", "min"])
ap.add_argument("--sizes", help="only these sizes, bytes, comma-separated")
ap.add_argument("--ops", help="only these collectives, comma-separated")
ap.add_argument("--sittings", action="store_true",
                help="the files are several sittings: each library's figure is the median of its runs' medians")
a = ap.parse_args()

col = 5 if a.stat == "med" else 4
runs = collections.defaultdict(lambda: collections.defaultdict(list))  # (op, m) -> label -> [us]
labels, failed = [], []
chosen = {}  # (op, m) -> "ring, n = 128": optcast's choice, from its "# op bytes: alg, n = N" lines
for f in a.files:
    for line in open(f):
        c = re.match(r"# (\w+) (\d+): (\w+), n = (\d+)$", line.strip())
        if c:
            chosen.setdefault((c.group(1), int(c.group(2))), "%s, n = %s" % (c.group(3), c.group(4)))
            continue
        t = line.split()
        if len(t) != 8 or line.startswith("#") or not t[2].isdigit():
            continue
        label = re.sub(r"#\d+$", "", t[0])
        op = "allreduce" if t[1].startswith("allreduce") else t[1]
        if label not in labels:
            labels.append(label)
        if t[7] != "ok":  # shown whatever the filters
            failed.append("%s %s %s" % (t[0], t[1], t[2]))
        if (a.sizes and t[2] not in a.sizes.split(",")) or (a.ops and op not in a.ops.split(",")):
            continue
        runs[(op, int(t[2]))][label].append(float(t[col]))

B = a.rate_mbit * 1e6 / 8 * a.rails
p, n = a.p, a.ppn


def bound_us(op, m):
    if p < 2:  # one host: nothing crosses a link
        return None
    if m < 262144 or op == "barrier":  # a barrier carries no bytes: no bandwidth bound
        return None
    t = m / B * 1e6
    if op == "bcast":
        return t * (1 + (math.log2(p) - 1) / 64)
    if op == "reduce":
        return t
    if op == "allreduce":
        return 2 * (p - 1) / p * t
    if op == "alltoall":
        return (p - 1) * n * n * t
    return (p - 1) * n * t


def fmt(us):
    if us is None:
        return "—"
    if us < 10:  # per-call costs on one host: a tenth of a microsecond tells
        return "%.1f µs" % us
    if us < 1000:
        return "%.0f µs" % us
    if us < 1e6:
        return "%.3g ms" % (us / 1000)
    return "%.3g s" % (us / 1e6)


def hsize(m):
    for u, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if m >= s and m % s == 0:
            return "%d %s" % (m // s, u)
    return "%d B" % m


order = ["bcast", "scatter", "gather", "reduce", "allreduce", "allgather", "alltoall", "barrier"]
ours = "optcast"
peers = [l for l in labels if l != ours]
print("| op | size | " + " | ".join(labels) + " | bound | optcast / bound | optcast / best peer | optcast's choice |")
print("|---|---:|" + "---:|" * len(labels) + "---:|---:|---:|---|")
# A barrier has no size: the benchmarks run it at every size of their list, and one row
# (the smallest size's) says it all.
smallest_barrier = min((m for (op, m) in runs if op == "barrier"), default=None)
for (op, m) in sorted(runs, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[0], k[1])):
    if op == "barrier" and m != smallest_barrier:
        continue
    by = runs[(op, m)]
    cells = []
    for l in labels:
        v = by.get(l, [])
        if not v:
            cells.append("")
        elif a.sittings:
            cells.append(fmt(statistics.median(v)))
        elif l == ours and len(v) > 1:
            cells.append("%s–%s" % (fmt(min(v)), fmt(max(v))) if fmt(min(v)) != fmt(max(v)) else fmt(v[0]))
        else:
            cells.append(fmt(min(v)))  # a peer's variants: its best
    b = bound_us(op, m)
    one = statistics.median if a.sittings else None
    mine = (one or max)(by[ours]) if by.get(ours) else None
    best = min(((one or min)(by[l]) for l in peers if by.get(l)), default=None)
    r_bound = "%.2f×" % (mine / b) if mine and b else "—"
    r_peer = "%.2f×" % (mine / best) if mine and best else "—"
    print("| %s | %s | %s | %s | %s | %s | %s |" % (op, hsize(m), " | ".join(cells), fmt(b), r_bound, r_peer, chosen.get((op, m), "")))
if failed:
    print("\nresults wrong (FAIL): " + ", ".join(failed))
    sys.exit(1)
