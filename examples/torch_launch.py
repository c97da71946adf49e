"""How the PyTorch examples start: one rank per process from torchrun-style variables
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or --np N ranks spawned on this machine;
then a default group over env:// (gloo, beside which each example makes its own groups,
or the example's choice)."""
import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp

try:
    import optcast_torch  # noqa: F401  (registers backend "optcast")
except ImportError as e:
    sys.exit(f"{os.path.basename(sys.argv[0])}: optcast_torch is not importable ({e}); "
             "set PYTHONPATH=build/bindings/torch and run /usr/bin/python3")

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def add_arguments(ap, port):
    ap.add_argument("--np", type=int, default=0, help="start N ranks on this machine instead of reading RANK etc.")
    ap.add_argument("--port", type=int, default=port, help=f"the store's port with --np (default {port})")


def launch(ap, args, run, backend="gloo", may_die=(), **init):
    """Calls run(rank, size, args) in every rank: spawned here with --np, else this process.
    The default group is `backend`'s (init: more of init_process_group's arguments). With
    --np, the ranks in `may_die` may end by a signal (an example that kills one) without
    failing the launch, and the others go on meanwhile (torch's spawn would stop them)."""
    if args.np:
        if not may_die:
            mp.spawn(_spawned, args=(run, args, backend, init), nprocs=args.np)
            return
        ctx = mp.get_context("spawn")
        ranks = [ctx.Process(target=_spawned, args=(r, run, args, backend, init)) for r in range(args.np)]
        for p in ranks:
            p.start()
        for p in ranks:
            p.join()
        bad = [f"rank {r} exited with {p.exitcode}" for r, p in enumerate(ranks)
               if p.exitcode != 0 and not (r in may_die and p.exitcode < 0)]
        if bad:
            sys.exit(f"{os.path.basename(sys.argv[0])}: " + ", ".join(bad))
        return
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        ap.error(f"set {', '.join(missing)} (torchrun-style), or pass --np N")
    _start(run, args, backend, init)


def _spawned(rank, run, args, backend="gloo", init=None):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port), RANK=str(rank), WORLD_SIZE=str(args.np))
    _start(run, args, backend, init or {})


def _start(run, args, backend="gloo", init=None):
    dist.init_process_group(backend, init_method="env://", **(init or {}))
    run(dist.get_rank(), dist.get_world_size(), args)
    if dist.is_initialized():  # an example may have ended it itself
        dist.destroy_process_group()
