#!/usr/bin/python3
"""DistributedDataParallel training that loses a worker and goes on (optcast_torch.shrink).

The workers train a small CPU model with backend "optcast" as the default group. At
--kill-step, worker --kill-rank kills itself (SIGKILL), while the others wait on it in
the step's gradient allreduce. Each survivor's step fails (RuntimeError); it calls
optcast_torch.shrink(group) for a group of the survivors, takes the step of the new rank
0 (and, through DDP's construction on the new group, its parameters), rebuilds DDP and
trains to the end on the survivors. The new rank 0 writes the state it went on from to
--checkpoint FILE.

--resume FILE starts from such a checkpoint instead, with no kill: a run of the
survivors' size from that step, whose losses must equal the survivors' (every rank
draws each step's whole global batch and takes its share, so the data do not depend on
the number of workers):

    examples/torch_elastic.py --np 4 --checkpoint /tmp/elastic.pt --json > survivors.json
    examples/torch_elastic.py --np 3 --resume /tmp/elastic.pt --json > fresh.json

Rank 0 hosts torch's store (env://): it is not the one to die. Without --np, start one
process per rank with torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) under a launcher that lets the others run on when one dies.
"""
import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import torch_launch
import optcast_torch


def model_for(args):
    torch.manual_seed(args.seed)
    layers = [torch.nn.Linear(64, args.width), torch.nn.ReLU()]
    for _ in range(args.depth - 1):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(args.width, 1))
    return torch.nn.Sequential(*layers)


def share(args, step, rank, size):
    """Step `step`'s global batch, the same for any job size; this rank's part of it."""
    gen = torch.Generator().manual_seed(args.seed * 100003 + step)
    x = torch.randn(args.batch, 64, generator=gen)
    y = x.sum(1, keepdim=True).sin()
    n = args.batch // size
    return x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]


def run(rank, size, args):
    group = dist.group.WORLD
    model = model_for(args)
    step = 0
    if args.resume:
        ck = torch.load(args.resume)
        model.load_state_dict(ck["model"])
        step = ck["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses, shrinks = {}, []
    while step < args.steps:
        if not args.resume and not shrinks and rank == args.kill_rank and step == args.kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            if args.batch % group.size():
                sys.exit(f"torch_elastic: --batch {args.batch} does not split among {group.size()} ranks")
            xs, ys = share(args, step, group.rank(), group.size())
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(xs), ys)
            loss.backward()
            total = loss.detach().clone()
            dist.all_reduce(total, group=group)
            opt.step()  # last: a step that failed anywhere before it left this rank's model as it was
            losses[step] = total.item() / group.size()
            step += 1
        except RuntimeError as e:
            if len(shrinks) >= args.most_failures:
                raise
            t0 = time.perf_counter()
            print(f"torch_elastic: rank {rank} (of {group.size()}): step {step} failed ({str(e).splitlines()[0][:200]}); shrinking",
                  file=sys.stderr, flush=True)
            group = optcast_torch.shrink(group)
            # The new rank 0's step; its parameters come with DDP's construction. A fresh
            # model (a copy), so that nothing of the old DDP's hooks stays on it.
            s = torch.tensor([step], dtype=torch.int64)
            o = dist.BroadcastOptions()
            o.rootRank = 0
            group.broadcast([s], o).wait()
            step = int(s.item())
            fresh = model_for(args)
            fresh.load_state_dict(model.state_dict())
            model, ddp = fresh, None
            ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
            opt = torch.optim.SGD(model.parameters(), lr=args.lr)
            shrinks.append({"at_step": step, "ranks": group.size(), "ms": (time.perf_counter() - t0) * 1e3})
            if group.rank() == 0 and args.checkpoint:
                torch.save({"model": model.state_dict(), "step": step}, args.checkpoint)
            losses = {k: v for k, v in losses.items() if k < step}
    if group.rank() == 0:
        out = {"ranks_at_start": size, "ranks_at_end": group.size(), "steps": args.steps,
               "resumed_at": ck["step"] if args.resume else None, "shrinks": shrinks,
               "losses": {str(k): v for k, v in sorted(losses.items())}}
        if args.json:
            print(json.dumps(out), flush=True)
        else:
            print(f"DDP from {size} ranks to {group.size()}: {args.steps} steps of a global batch of {args.batch}")
            for s in shrinks:
                print(f"  shrunk to {s['ranks']} ranks at step {s['at_step']} in {s['ms']:.1f} ms")
            first = min(losses) if losses else None
            if first is not None:
                print(f"  loss at step {first} {losses[first]:.6f}, at step {max(losses)} {losses[max(losses)]:.6f}")
    del ddp
    if group is not dist.group.WORLD:
        dist.destroy_process_group(group)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    ap.add_argument("--kill-step", type=int, default=10, help="the step at which --kill-rank dies (default 10)")
    ap.add_argument("--kill-rank", type=int, default=2, help="the worker that dies (default 2; not 0, which hosts torch's store)")
    ap.add_argument("--checkpoint", help="the new rank 0 writes the state it went on from here")
    ap.add_argument("--resume", help="start from a --checkpoint file instead, with no kill")
    ap.add_argument("--most-failures", type=int, default=1, help="failures to go on from before giving up (default 1)")
    ap.add_argument("--batch", type=int, default=48, help="global batch, a multiple of every job size (default 48)")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=30, help="the group's collectives' deadline, seconds (default 30)")
    ap.add_argument("--json", action="store_true", help="rank 0 prints one JSON object")
    torch_launch.add_arguments(ap, port=29533)
    args = ap.parse_args()
    if args.kill_rank == 0 and not args.resume:
        ap.error("--kill-rank 0: rank 0 hosts torch's store (env://), which dies with it")
    torch_launch.launch(ap, args, run, backend="optcast", may_die=() if args.resume else (args.kill_rank,),
                        timeout=datetime.timedelta(seconds=args.timeout))


if __name__ == "__main__":
    main()
