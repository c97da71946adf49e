#!/usr/bin/python3
"""optcast as a torch.distributed backend: every collective torch asks of a CPU backend,
on every dtype and operator torch defines for it, checked element by element on N real
processes (torch.multiprocessing), bootstrapped through torch's own store.

    tests/torch_backend_test.py [--np N] [--init tcp|env|file] [CHECK...]

Each rank computes what every result must be from the inputs every rank is known to
have (functions of rank and check), so nothing is taken from the code under test.
Exits 77 (skipped) with the reason where torch or the optcast_torch module is missing.
"""
import argparse
import os
import shutil
import socket
import sys
import tempfile
import traceback
import warnings

import torch_or_skip  # noqa: F401  (exits 77 where torch or optcast_torch is missing)
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

R = dist.ReduceOp
INT_TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
COMPLEX_TYPES = [torch.complex64, torch.complex128]


def data(rank, n, dtype, salt=0):
    """Rank `rank`'s input: small integers (exact in every dtype, sums and products too)."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + salt) % 5 + 1
    if dtype == torch.bool:
        return (v % 2 == rank % 2)
    if dtype in COMPLEX_TYPES:
        return torch.complex(v.double(), (v % 3).double()).to(dtype)
    return v.to(dtype)


def reduce_all(tensors, op):
    s = torch.stack([t if t.dtype != torch.bool else t.to(torch.uint8) for t in tensors])
    dtype = tensors[0].dtype
    wide = s.to(torch.complex128 if dtype in COMPLEX_TYPES else torch.float64 if dtype in FLOAT_TYPES else torch.int64)
    if op == R.SUM:
        r = wide.sum(0)
    elif op == R.AVG:
        r = wide.sum(0) / len(tensors)
    elif op == R.PRODUCT:
        r = wide.prod(0)
    elif op == R.MIN:
        r = wide.min(0).values
    elif op == R.MAX:
        r = wide.max(0).values
    else:
        r = wide[0].clone()
        for t in wide[1:]:
            r = r & t if op == R.BAND else r | t if op == R.BOR else r ^ t
    if dtype == torch.bool:
        return r != 0
    return r.to(dtype)


def ops_for(dtype):
    if dtype == torch.bool:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    if dtype in INT_TYPES:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    if dtype in FLOAT_TYPES:
        return [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX]
    return [R.SUM, R.AVG]  # torch refuses the others on complex tensors itself


def same(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.flatten()[:8].tolist()}... ({got.dtype}, {tuple(got.shape)}), "
                             f"want {want.flatten()[:8].tolist()}... ({want.dtype}, {tuple(want.shape)})")


# --- the checks: each runs on every rank -----------------------------------------------

def check_broadcast(rank, p):
    for dtype in INT_TYPES + FLOAT_TYPES + COMPLEX_TYPES + [torch.bool]:
        for root in range(p):
            t = data(rank, 1000, dtype)
            dist.broadcast(t, src=root)
            same(t, data(root, 1000, dtype), f"broadcast {dtype} from {root}")
    # non-contiguous: a transposed view, written back in place
    base = data(rank, 64, torch.float32).view(8, 8)
    view = base.t()
    dist.broadcast(view, src=p - 1)
    same(base, data(p - 1, 64, torch.float32).view(8, 8), "broadcast of a transposed view")
    # large enough for pipelining
    big = data(rank, 1 << 20, torch.float32)
    dist.broadcast(big, src=0)
    same(big, data(0, 1 << 20, torch.float32), "broadcast of 4 MiB")


def check_allreduce(rank, p):
    for dtype in INT_TYPES + FLOAT_TYPES + COMPLEX_TYPES + [torch.bool]:
        for op in ops_for(dtype):
            t = data(rank, 37, dtype)
            dist.all_reduce(t, op=op)
            same(t, reduce_all([data(r, 37, dtype) for r in range(p)], op), f"all_reduce {op} {dtype}")
    big = data(rank, 300000, torch.float32)
    dist.all_reduce(big)
    same(big, reduce_all([data(r, 300000, torch.float32) for r in range(p)], R.SUM), "all_reduce of 1.2 MB")
    view = data(rank, 36, torch.int32).view(6, 6).t()
    dist.all_reduce(view, op=R.MAX)
    same(view, reduce_all([data(r, 36, torch.int32) for r in range(p)], R.MAX).view(6, 6).t(), "all_reduce of a view")


def check_refused(rank, p):
    for dtype, op in [(torch.float32, R.BAND), (torch.bfloat16, R.BXOR), (torch.int32, R.AVG)]:
        try:
            dist.all_reduce(torch.ones(4, dtype=dtype), op=op)
        except RuntimeError as e:
            if "optcast" not in str(e) or "not defined" not in str(e):
                raise AssertionError(f"all_reduce {op} {dtype}: unclear error: {e}")
        else:
            raise AssertionError(f"all_reduce {op} {dtype} was not refused")
    try:
        dist.broadcast(torch.ones(4), src=p)
    except (RuntimeError, ValueError):
        pass
    else:
        raise AssertionError("a broadcast from a rank outside the group was not refused")
    # the group still works after refused calls (nothing was sent)
    t = torch.ones(3)
    dist.all_reduce(t)
    same(t, torch.full((3,), float(p)), "all_reduce after refused calls")


def check_allreduce_coalesced(rank, p):
    ts = [data(rank, n, torch.float64, salt=n) for n in (1, 10, 100)]
    dist.all_reduce_coalesced(ts, op=R.MAX)
    for n, t in zip((1, 10, 100), ts):
        same(t, reduce_all([data(r, n, torch.float64, salt=n) for r in range(p)], R.MAX), f"all_reduce_coalesced {n}")


def check_reduce(rank, p):
    for dtype in [torch.int64, torch.float32, torch.float16, torch.complex128]:
        for root in range(p):
            t = data(rank, 50, dtype)
            dist.reduce(t, dst=root, op=R.SUM)
            if rank == root:
                same(t, reduce_all([data(r, 50, dtype) for r in range(p)], R.SUM), f"reduce {dtype} to {root}")


def check_allgather(rank, p):
    for dtype in [torch.uint8, torch.float32, torch.bfloat16, torch.complex64]:
        outs = [torch.empty(9, dtype=dtype) for _ in range(p)]
        dist.all_gather(outs, data(rank, 9, dtype))
        for r in range(p):
            same(outs[r], data(r, 9, dtype), f"all_gather {dtype} from {r}")
    out = torch.empty(p * 11, dtype=torch.int32)
    dist._all_gather_base(out, data(rank, 11, torch.int32))
    same(out, torch.cat([data(r, 11, torch.int32) for r in range(p)]), "_all_gather_base")
    outs = [[torch.empty(3, dtype=torch.int64), torch.empty(2, 2, dtype=torch.int64)] for _ in range(p)]
    dist.all_gather_coalesced(outs, [data(rank, 3, torch.int64), data(rank, 4, torch.int64, salt=1).view(2, 2)])
    for r in range(p):
        same(outs[r][0], data(r, 3, torch.int64), f"all_gather_coalesced 1-D from {r}")
        same(outs[r][1], data(r, 4, torch.int64, salt=1).view(2, 2), f"all_gather_coalesced 2-D from {r}")


def check_gather_scatter(rank, p):
    for root in range(p):
        outs = [torch.empty(13, dtype=torch.float64) for _ in range(p)] if rank == root else None
        dist.gather(data(rank, 13, torch.float64), gather_list=outs, dst=root)
        if rank == root:
            for r in range(p):
                same(outs[r], data(r, 13, torch.float64), f"gather to {root} from {r}")
        out = torch.empty(21, dtype=torch.int16)
        ins = [data(r, 21, torch.int16, salt=root) for r in range(p)] if rank == root else None
        dist.scatter(out, scatter_list=ins, src=root)
        same(out, data(rank, 21, torch.int16, salt=root), f"scatter from {root}")


def check_reduce_scatter(rank, p):
    for op in [R.SUM, R.MAX, R.AVG]:
        out = torch.empty(6, dtype=torch.float32)
        ins = [data(rank, 6, torch.float32, salt=j) for j in range(p)]
        dist.reduce_scatter(out, ins, op=op)
        same(out, reduce_all([data(r, 6, torch.float32, salt=rank) for r in range(p)], op), f"reduce_scatter {op}")
    out = torch.empty(5, dtype=torch.int64)
    dist._reduce_scatter_base(out, torch.cat([data(rank, 5, torch.int64, salt=j) for j in range(p)]))
    same(out, reduce_all([data(r, 5, torch.int64, salt=rank) for r in range(p)], R.SUM), "_reduce_scatter_base")


def check_alltoall(rank, p):
    # even
    inp = torch.cat([data(rank, 4, torch.float32, salt=j) for j in range(p)])
    out = torch.empty(4 * p)
    dist.all_to_all_single(out, inp)
    same(out, torch.cat([data(j, 4, torch.float32, salt=rank) for j in range(p)]), "all_to_all_single even")
    # uneven: rank r sends (r + j) % 3 rows of width 2 to rank j (some empty)
    rows = lambda src, dst: (src + dst) % 3
    piece = lambda src, dst: data(src, rows(src, dst) * 2, torch.int64, salt=dst).view(-1, 2)
    inp = torch.cat([piece(rank, j) for j in range(p)])
    out = torch.empty(sum(rows(j, rank) for j in range(p)), 2, dtype=torch.int64)
    dist.all_to_all_single(out, inp, output_split_sizes=[rows(j, rank) for j in range(p)],
                           input_split_sizes=[rows(rank, j) for j in range(p)])
    same(out, torch.cat([piece(j, rank) for j in range(p)]), "all_to_all_single uneven")
    # lists of tensors of different sizes
    outs = [torch.empty(rows(j, rank) + 1, dtype=torch.float64) for j in range(p)]
    dist.all_to_all(outs, [data(rank, rows(rank, j) + 1, torch.float64, salt=j) for j in range(p)])
    for j in range(p):
        same(outs[j], data(j, rows(j, rank) + 1, torch.float64, salt=rank), f"all_to_all from {j}")


def check_p2p(rank, p):
    right, left = (rank + 1) % p, (rank - 1) % p
    # receives posted before the sends on every rank
    got = torch.empty(100, dtype=torch.float32)
    rq = dist.irecv(got, src=left, tag=7)
    sq = dist.isend(data(rank, 100, torch.float32), dst=right, tag=7)
    rq.wait()
    sq.wait()
    same(got, data(left, 100, torch.float32), "irecv from the left")
    # two tags in flight, received in the other order
    if p >= 2 and rank in (0, 1):
        peer = 1 - rank
        if rank == 0:
            dist.send(torch.full((3,), 1.0), dst=peer, tag=1)
            dist.send(torch.full((3,), 2.0), dst=peer, tag=2)
        else:
            b, a = torch.empty(3), torch.empty(3)
            wb = dist.irecv(b, src=peer, tag=2)
            wa = dist.irecv(a, src=peer, tag=1)
            wa.wait()
            wb.wait()
            same(a, torch.full((3,), 1.0), "tag 1")
            same(b, torch.full((3,), 2.0), "tag 2")
    # from any source: rank 0 learns who sent each message
    if rank == 0:
        senders = []
        for _ in range(p - 1):
            t = torch.empty(5, dtype=torch.int32)
            src = dist.recv(t, src=None, tag=11)
            same(t, data(src, 5, torch.int32, salt=11), f"recv from any source (sent by {src})")
            senders.append(src)
        if sorted(senders) != list(range(1, p)):
            raise AssertionError(f"recv from any source named the senders {senders}")
    else:
        dist.send(data(rank, 5, torch.int32, salt=11), dst=0, tag=11)
    dist.barrier()


def check_async(rank, p):
    works = []
    ts = [data(rank, 1000, torch.float32, salt=i) for i in range(8)]
    for t in ts:
        works.append(dist.all_reduce(t, async_op=True))
    fut = works[-1].get_future()
    for w in works:
        w.wait()
        if not w.is_completed():
            raise AssertionError("a waited work is not completed")
    value = fut.wait()
    same(value[0], ts[-1], "the future's value")
    for i, t in enumerate(ts):
        same(t, reduce_all([data(r, 1000, torch.float32, salt=i) for r in range(p)], R.SUM), f"async all_reduce {i}")
    # a callback chained on the future, as DDP's reducer does
    t = torch.ones(4)
    chained = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    same(chained.wait(), torch.full((4,), 2.0 * p), "a future's callback")


def check_groups(rank, p):
    if p < 3:
        return
    evens = dist.new_group([r for r in range(p) if r % 2 == 0])
    odds = dist.new_group([r for r in range(p) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odds
    members = [r for r in range(p) if r % 2 == rank % 2]
    t = data(rank, 10, torch.int64)
    dist.all_reduce(t, group=mine)
    same(t, reduce_all([data(r, 10, torch.int64) for r in members], R.SUM), "all_reduce in a new group")
    b = data(rank, 5, torch.float32)
    dist.broadcast(b, src=members[-1], group=mine)
    same(b, data(members[-1], 5, torch.float32), "broadcast in a new group (a global root)")


def check_env(rank, p):
    # optcast's own settings reach a group's ranks as job_config::from_env reads them: a bad
    # one refused with its name, on every rank, before anything is sent; a good one used.
    def refused(name, value):
        os.environ[name] = value
        try:
            dist.new_group(backend="optcast")
        except RuntimeError as e:
            if name not in str(e):
                raise AssertionError(f"{name}={value!r} refused without naming it: {e}")
        else:
            raise AssertionError(f"{name}={value!r} was accepted")
        finally:
            del os.environ[name]

    refused("OPTCAST_FAMILY", "5")
    refused("OPTCAST_PORTS", "0")
    refused("OPTCAST_IFNAME", "=optcast-no-such-if")
    os.environ["OPTCAST_HOST"] = "127.0.0.1"
    try:
        g = dist.new_group(backend="optcast")
    finally:
        del os.environ["OPTCAST_HOST"]
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t, group=g)
    if not torch.equal(t, torch.full((4,), p * (p + 1) / 2)):
        raise AssertionError(f"all_reduce on a group with OPTCAST_HOST set: {t}")


def check_trace(rank, p):
    # OPTCAST_TRACE through torch: each group traces into a directory of its own (the
    # default group into DIR, group N into DIR/group-N); no group's files overwrite another's.
    import gc
    import json
    base = os.path.join(os.environ["OPTCAST_TORCH_TEST_DIR"], "trace")
    os.environ["OPTCAST_TRACE"] = base
    try:
        g = dist.new_group(backend="optcast")
        h = dist.new_group(backend="optcast")
    finally:
        del os.environ["OPTCAST_TRACE"]
    names = [dist.distributed_c10d._pg_names[x] for x in (g, h)]
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=g)
    b = data(rank, 300, torch.int32)
    dist.broadcast(b, src=p - 1, group=h)
    same(b, data(p - 1, 300, torch.int32), "broadcast in a traced group")
    for x in (g, h):
        dist.destroy_process_group(x)
    del g, h, x
    gc.collect()  # the traces are written as the groups' communicators go
    dist.barrier()
    if rank != 0:
        return
    for name, op in zip(names, ("allreduce", "broadcast")):
        d = os.path.join(base, f"group-{name}")
        files = sorted(os.listdir(d))
        if files != sorted(f"rank{r}.json" for r in range(p)):
            raise AssertionError(f"{d} holds {files}, not one file per rank")
        starts, ends, ops = set(), set(), set()
        for f in files:
            ev = json.load(open(os.path.join(d, f)))["traceEvents"]
            ops |= {e["name"] for e in ev if e.get("cat") == "collective"}
            starts |= {e["id"] for e in ev if e["ph"] == "s"}
            ends |= {e["id"] for e in ev if e["ph"] == "f"}
        if ops != {op}:
            raise AssertionError(f"group {name} traced {ops}, not only {op}")
        if not starts or starts != ends:
            raise AssertionError(f"group {name}: {len(starts)} messages sent, {len(ends)} received, {len(starts ^ ends)} unmatched")
    if os.path.exists(os.path.join(base, "rank0.json")):
        raise AssertionError("the default group (not traced) wrote a trace")


def check_ddp(rank, p):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    reference = [q.detach().clone() for q in model.parameters()]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x = torch.randn(p, 4, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randn(p, 4, 1, generator=torch.Generator().manual_seed(2))
    loss = torch.nn.functional.mse_loss(ddp(x[rank]), y[rank])
    loss.backward()
    opt.step()
    # the same step on every rank's data in this process, averaged as DDP averages
    torch.manual_seed(0)
    local = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    for q, r in zip(local.parameters(), reference):
        q.data.copy_(r)
    grads = [torch.zeros_like(q) for q in local.parameters()]
    for r in range(p):
        local.zero_grad()
        torch.nn.functional.mse_loss(local(x[r]), y[r]).backward()
        for g, q in zip(grads, local.parameters()):
            g += q.grad / p
    for q, r, g in zip(model.parameters(), reference, grads):
        if not torch.allclose(q.detach(), r - 0.1 * g, rtol=1e-5, atol=1e-6):
            raise AssertionError("a DDP step differs from the same step computed in one process")


# The failure paths' checks, in a file of their own (found in globals() as the rest).
from torch_failure_checks import check_failure_raises, check_failure_then_destroy  # noqa: E402,F401

CHECKS = {name[len("check_"):]: f for name, f in sorted(globals().items()) if name.startswith("check_")}


def rank_main(rank, p, init, where, names, results):
    warnings.filterwarnings("ignore", category=UserWarning)  # torch's deprecations of the calls tested
    os.environ["OPTCAST_LOG"] = os.environ.get("OPTCAST_LOG", "error")
    if init == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(where), RANK=str(rank), WORLD_SIZE=str(p))
        dist.init_process_group("optcast", init_method="env://")
    elif init == "tcp":
        dist.init_process_group("optcast", init_method=f"tcp://127.0.0.1:{where}", rank=rank, world_size=p)
    else:
        dist.init_process_group("optcast", init_method=f"file://{where}", rank=rank, world_size=p)
    failed = []
    for name in names:
        try:
            CHECKS[name](rank, p)
        except Exception:
            failed.append((name, traceback.format_exc(limit=3)))
            break  # the ranks are out of step after a failed check
    results.put((rank, failed))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--init", choices=["tcp", "env", "file"], default="tcp", help="torch's init_method")
    ap.add_argument("checks", nargs="*", help=f"checks to run (default all): {', '.join(CHECKS)}")
    a = ap.parse_args()
    names = a.checks or list(CHECKS)
    for n in names:
        if n not in CHECKS:
            ap.error(f"no check {n!r}; there are: {', '.join(CHECKS)}")
    tmp = tempfile.mkdtemp()
    os.environ["OPTCAST_TORCH_TEST_DIR"] = tmp  # for the checks that need files (trace)
    where = os.path.join(tmp, "store") if a.init == "file" else free_port()
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    procs = [ctx.Process(target=rank_main, args=(r, a.np, a.init, where, names, results)) for r in range(a.np)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(timeout=600)
    bad = 0
    got = {}
    while not results.empty():
        r, failed = results.get()
        got[r] = failed
    for r, pr in enumerate(procs):
        if pr.is_alive():
            pr.kill()
            print(f"FAIL rank {r}: still running after 600 s")
            bad += 1
        elif pr.exitcode != 0 or r not in got:
            print(f"FAIL rank {r}: exit code {pr.exitcode}")
            bad += 1
        for name, tb in got.get(r, []):
            print(f"FAIL rank {r}, check {name}:\n{tb}")
            bad += 1
    shutil.rmtree(tmp, ignore_errors=True)
    if bad:
        return 1
    print(f"{len(names)} checks passed on {a.np} processes (init_method {a.init}): {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
