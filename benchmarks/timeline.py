#!/usr/bin/env python3
"""Where a traced run's time went: one collective call, step by step.

usage: timeline.py DIR [--seq N] [--steps K]

Reads DIR/rank<r>.json (OPTCAST_TRACE=DIR, optcast/trace.hpp; each rank's times moved
onto rank 0's clock by its measured offset, as `optcast trace merge` does). Matches every send
with its receive (same pair of ranks, collective and step) and prints, for the call with
sequence number N (default: the last of those that moved the most bytes), one line per step:
  start, end        first post and last completion of the step, from the call's start
  xfer              median time from the later of (send posted, receive posted) to the
                    receive's completion: what a message took once both sides were there
  recv late         receives posted after their send (the data waited for its receive)
  wait              median time a rank spent between its previous step's completion and
                    posting this one (its round loop between rounds)
and per rank: the call's time, and the part of it with no operation outstanding.
"""
import argparse
import collections
import glob
import json
import os
import statistics
import sys

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dir")
ap.add_argument("--seq", type=int, default=None)
ap.add_argument("--steps", type=int, default=200, help="print at most this many steps")
a = ap.parse_args()

files = sorted(glob.glob(os.path.join(a.dir, "rank*.json")))
if not files:
    sys.exit("timeline: no %s/rank*.json" % a.dir)
ev = []  # (rank, kind, peer, seq, step, bytes, posted, done, error)
for f in files:
    with open(f) as fh:
        j = json.load(fh)
    meta = j["optcast"]
    shift = meta.get("clock_offset_s") or 0
    for e in j["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in ("send", "recv"):
            continue
        x = e["args"]
        posted = e["ts"] * 1e-6 + shift
        done = posted + e["dur"] * 1e-6 if x.get("error") != "never completed" else posted - 1
        ev.append((meta["rank"], 0 if e["cat"] == "send" else 1, x["peer"], x["seq"], x["step"], x["bytes"], posted, done,
                   1 if "error" in x else 0))
by_seq = collections.defaultdict(list)
for e in ev:
    by_seq[e[3]].append(e)
user = {s: es for s, es in by_seq.items() if s < 0x7fff0000}  # not the benchmark's own timing collectives
if not user:
    sys.exit("timeline: no collective calls in the trace")
span = lambda es: max(e[7] for e in es) - min(e[6] for e in es)
# Default: the last call that moved the most bytes (a benchmark's own timing collectives move a
# few; its warm-up, with the connections opening, comes first).
sent = lambda es: sum(e[5] for e in es if e[1] == 0)
seq = a.seq if a.seq is not None else max(user, key=lambda s: (sent(user[s]), s))
es = by_seq.get(seq)
if not es:
    sys.exit("timeline: no call with sequence number %d" % seq)
t0 = min(e[6] for e in es)
ms = lambda t: (t - t0) * 1e3

sends = {(e[0], e[2], e[4]): e for e in es if e[1] == 0}  # (from, to, step)
steps = collections.defaultdict(lambda: {"post": [], "done": [], "xfer": [], "late": 0, "n": 0})
for e in es:
    s = steps[e[4]]
    s["post"].append(e[6])
    s["done"].append(e[7])
    if e[1] == 1:
        snd = sends.get((e[2], e[0], e[4]))
        if snd:
            s["xfer"].append(e[7] - max(e[6], snd[6]))
            s["late"] += e[6] > snd[6]
            s["n"] += 1
# Between rounds: per rank, time from the last completion of step i to the first post of
# the next step it takes part in.
per_rank = collections.defaultdict(list)
for e in es:
    per_rank[e[0]].append(e)
waits = collections.defaultdict(list)
idle = {}
for r, rs in per_rank.items():
    by_step = collections.defaultdict(list)
    for e in rs:
        by_step[e[4]].append(e)
    order = sorted(by_step)
    for prev, cur in zip(order, order[1:]):
        waits[cur].append(min(e[6] for e in by_step[cur]) - max(e[7] for e in by_step[prev]))
    # Time with nothing outstanding, between the rank's first post and last completion.
    iv = sorted((e[6], e[7]) for e in rs)
    gap, end = 0.0, iv[0][1]
    for s0, s1 in iv[1:]:
        if s0 > end:
            gap += s0 - end
        end = max(end, s1)
    idle[r] = (max(e[7] for e in rs) - min(e[6] for e in rs), gap)

total_bytes = sum(e[5] for e in es if e[1] == 0)
print("collective %d: %d ranks, %d messages, %d bytes sent, %.3f ms from first post to last completion"
      % (seq, len(per_rank), sum(1 for e in es if e[1] == 0), total_bytes, span(es) * 1e3))
print("%6s %9s %9s %9s %9s %10s" % ("step", "start ms", "end ms", "xfer ms", "wait ms", "recv late"))
for k in sorted(steps)[: a.steps]:
    s = steps[k]
    med = lambda v: "%9.3f" % (statistics.median(v) * 1e3) if v else "%9s" % "-"
    print("%6d %9.3f %9.3f %s %s %5d of %d" % (k, ms(min(s["post"])), ms(max(s["done"])), med(s["xfer"]), med(waits.get(k, [])),
                                               s["late"], s["n"]))
print("rank  call ms  nothing outstanding ms")
for r in sorted(idle):
    print("%4d %8.3f %8.3f" % (r, idle[r][0] * 1e3, idle[r][1] * 1e3))
