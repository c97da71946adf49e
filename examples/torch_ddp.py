#!/usr/bin/python3
"""DistributedDataParallel training of a small CPU model, once with each backend (gloo and
optcast by default), same seed and data, in one job: prints each backend's step time
(median) and losses, which must agree up to float rounding.

Start one process per rank with torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), e.g. across the emulated cluster:

    examples/cluster_bench.sh 8 python examples/torch_ddp.py --steps 20

or on this machine: examples/torch_ddp.py --np 4.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

import torch_launch


def model_for(width, depth, seed):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(64, width), torch.nn.ReLU()]
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(*layers)


def train(backend, args, rank, size):
    group = dist.new_group(backend=backend)
    model = model_for(args.width, args.depth, args.seed)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + 1)
    # Every rank draws the whole batch of each step and takes its share: the same data
    # whichever backend, and the same global batch for any job size.
    losses, times = [], []
    for step in range(args.steps + 1):  # step 0 warms up (connections, buckets)
        x = torch.randn(args.batch, 64, generator=gen)
        y = x.sum(1, keepdim=True).sin()
        share = args.batch // size
        xs, ys = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        dist.barrier(group)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(xs), ys)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, group=group)
        if step > 0:
            times.append(dt)
            losses.append(global_loss.item() / size)
    # the slowest rank's step time counts
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    dist.destroy_process_group(group)
    params = sum(p.numel() for p in model.parameters())
    return {"backend": backend, "params": params, "step_ms_median": statistics.median(t.tolist()) * 1e3,
            "step_ms_min": min(t.tolist()) * 1e3, "losses": losses}


def run(rank, size, args):
    if args.batch % size:
        sys.exit(f"torch_ddp: --batch {args.batch} does not split among {size} ranks")
    results = [train(b, args, rank, size) for b in args.backends.split(",")]
    if rank == 0:
        if args.json:
            print(json.dumps({"ranks": size, "steps": args.steps, "batch": args.batch, "results": results}))
        else:
            print(f"DDP on {size} ranks: {results[0]['params']} parameters, global batch {args.batch}, "
                  f"{args.steps} steps (after one warm-up)")
            for r in results:
                print(f"  {r['backend']:8s} step {r['step_ms_median']:8.2f} ms median ({r['step_ms_min']:.2f} min)   "
                      f"loss first {r['losses'][0]:.6f} last {r['losses'][-1]:.6f}")
            if len(results) > 1:
                a, b = results[0]["losses"], results[1]["losses"]
                worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))
                print(f"  largest relative difference of the losses: {worst:.2e}")
                if worst > args.tolerance:
                    sys.exit(f"torch_ddp: the backends' losses differ by more than {args.tolerance:g} (relative)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="gloo,optcast", help="backends, in order (default gloo,optcast)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per backend (default 20)")
    ap.add_argument("--batch", type=int, default=256, help="global batch (default 256)")
    ap.add_argument("--width", type=int, default=1024, help="hidden width (default 1024)")
    ap.add_argument("--depth", type=int, default=4, help="hidden layers (default 4: about 3.2 M parameters)")
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP's gradient bucket size, MB (default 25)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=1e-4,
                    help="largest relative difference of the backends' losses before it exits with 1 (default 1e-4)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    torch_launch.add_arguments(ap, port=29531)
    args = ap.parse_args()
    torch_launch.launch(ap, args, run)


if __name__ == "__main__":
    main()
