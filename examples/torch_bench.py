#!/usr/bin/python3
"""dist.all_reduce and dist.broadcast through torch.distributed, for each backend (gloo and
optcast by default) in the same job, sizes 8 B to 64 MiB of float32: the median over
repetitions of the slowest rank's time for one call (each repetition starts after a
barrier), alternating backends size by size so that both see the same machine.

Start one process per rank with torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), e.g. across the emulated cluster:

    examples/cluster_bench.sh 8 python examples/torch_bench.py

or on this machine: examples/torch_bench.py --np 4.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

import torch_launch


def parse_size(s):
    units = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
    num = s.rstrip("KMGiBkmgib")
    return int(num) * units[s[len(num):].lower()]


def human(n):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def time_op(op, group, reps):
    times = []
    for _ in range(reps):
        dist.barrier(group)
        t0 = time.perf_counter()
        op()
        times.append(time.perf_counter() - t0)
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return statistics.median(t.tolist())


def run(rank, size, args):
    backends = args.backends.split(",")
    groups = {b: dist.new_group(backend=b) for b in backends}
    rows = []
    for nbytes in [parse_size(s) for s in args.sizes.split(",")]:
        n = max(1, nbytes // 4)
        for opname in args.ops.split(","):
            for b in backends:
                g = groups[b]
                t = torch.full((n,), float(rank + 1))
                if opname == "allreduce":
                    def op():
                        dist.all_reduce(t, group=g)
                elif opname == "broadcast":
                    def op():
                        dist.broadcast(t, src=0, group=g)
                else:
                    sys.exit(f"torch_bench: no operation {opname!r} (allreduce, broadcast)")
                op()  # warm up, and check the result once
                want = float(sum(range(1, size + 1))) if opname == "allreduce" else 1.0
                if t[0].item() != want or t[-1].item() != want:
                    sys.exit(f"torch_bench: {b} {opname} of {human(n * 4)} gave {t[0].item()}, wanted {want}")
                reps = max(args.min_reps, min(args.max_reps, int(args.budget / max(time_op(op, g, 2), 1e-6))))
                sec = time_op(op, g, reps)
                rows.append({"backend": b, "op": opname, "bytes": n * 4, "reps": reps, "median_us": sec * 1e6,
                             "algbw_MBps": n * 4 / sec / 1e6})
                if rank == 0 and not args.json and not args.quiet:
                    print(f"  {b:8s} {opname:9s} {human(n * 4):>9s}  {sec * 1e6:12.1f} us  ({reps} reps)",
                          file=sys.stderr, flush=True)
    if rank == 0:
        if args.json:
            print(json.dumps({"ranks": size, "rows": rows}))
        else:
            print(f"torch.distributed on {size} ranks: median of the slowest rank's time per call")
            print(f"{'op':9s} {'size':>9s}" + "".join(f" {b:>14s}" for b in backends) +
                  ("   optcast/gloo" if set(backends) >= {"gloo", "optcast"} else ""))
            keys = sorted({(r["op"], r["bytes"]) for r in rows}, key=lambda k: (k[0], k[1]))
            for opname, nb in keys:
                t = {r["backend"]: r["median_us"] for r in rows if r["op"] == opname and r["bytes"] == nb}
                line = f"{opname:9s} {human(nb):>9s}" + "".join(f" {t[b]:11.1f} us" for b in backends)
                if "gloo" in t and "optcast" in t:
                    line += f"   {t['optcast'] / t['gloo']:13.2f}"
                print(line)
    for g in groups.values():
        dist.destroy_process_group(g)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="gloo,optcast", help="default gloo,optcast")
    ap.add_argument("--ops", default="allreduce,broadcast", help="default allreduce,broadcast")
    ap.add_argument("--sizes", default="8,1KiB,64KiB,1MiB,16MiB,64MiB", help="bytes per call, comma-separated")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per backend, operation and size (default 1)")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--max-reps", type=int, default=200)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    torch_launch.add_arguments(ap, port=29541)
    args = ap.parse_args()
    torch_launch.launch(ap, args, run)


if __name__ == "__main__":
    main()
