"""How the PyTorch examples start: one rank per process from torchrun-style variables
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or --np N ranks spawned on this machine;
then a gloo default group over env://, beside which each example makes its own groups."""
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


def launch(ap, args, run):
    """Calls run(rank, size, args) in every rank: spawned here with --np, else this process."""
    if args.np:
        mp.spawn(_spawned, args=(run, args), nprocs=args.np)
        return
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        ap.error(f"set {', '.join(missing)} (torchrun-style), or pass --np N")
    _start(run, args)


def _spawned(rank, run, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port), RANK=str(rank), WORLD_SIZE=str(args.np))
    _start(run, args)


def _start(run, args):
    dist.init_process_group("gloo", init_method="env://")
    run(dist.get_rank(), dist.get_world_size(), args)
    dist.destroy_process_group()
