"""The torch backend's failure paths, for tests/torch_backend_test.py (which imports them
among its checks): a failed call raises where torch waits for it, and a group destroyed
at once after a failure has told the others."""
import datetime

import torch
import torch.distributed as dist


def check_failure_raises(rank, p):
    # A call that fails after it started (here the ranks disagree on its size, which only
    # their messages tell) raises where torch waits for it, in a synchronous call and on a
    # work alike: torch's own future-made work would return as if it had succeeded.
    g = dist.new_group(backend="optcast")
    try:
        dist.all_reduce(torch.ones(4 if rank == 0 else 5), group=g)
    except RuntimeError as e:
        if "optcast" not in str(e):
            raise AssertionError(f"a failed all_reduce: unclear error: {e}")
    else:
        raise AssertionError("an all_reduce the ranks called with different sizes returned as if it had succeeded")
    w = dist.all_reduce(torch.ones(3), group=g, async_op=True)  # on the broken group
    try:
        w.wait()
    except RuntimeError:
        pass
    else:
        raise AssertionError("the work of a call on a broken group waited without raising")
    if w.is_success():
        raise AssertionError("a failed work says it succeeded")
    # Destroyed at once, with the others perhaps still in the failed call: they must hear
    # of the failure all the same (the barrier on the world group would wait otherwise).
    dist.destroy_process_group(g)
    dist.barrier()


def check_failure_then_destroy(rank, p):
    # Rank 0 broadcasts where the others allreduce, and each rank destroys the group as
    # soon as its call ends (rank 0 first, the mismatch in the first message it gets, or
    # its sends done): every other rank, still waiting in its call, must raise (told by
    # rank 0 before it went), not wait for the group's timeout (60 s here).
    g = dist.new_group(backend="optcast", timeout=datetime.timedelta(seconds=60))
    t = torch.ones(16)
    try:
        if rank == 0:
            dist.broadcast(t, 0, group=g)
        else:
            dist.all_reduce(t, group=g)
    except RuntimeError as e:
        # Failed by the mismatch in its own call, or (a rank that heard of another's
        # failure before it made the call) by that earlier failure, which names it.
        if "called the collective differently" not in str(e) and "was called differently" not in str(e):
            raise AssertionError(f"a mismatched call: unclear error: {e}")
    else:
        # The root may only send (whether it hears of the others' calls depends on the
        # broadcast's algorithm): it leaves in good order, the others must still raise.
        if rank != 0:
            raise AssertionError("an allreduce met by a broadcast returned as if it had succeeded")
    dist.destroy_process_group(g)
    dist.barrier()
