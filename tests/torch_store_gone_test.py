#!/usr/bin/python3
"""When torch's store goes, the ranks say so, and blame no live rank.

With init_method tcp:// rank 0 hosts torch's TCPStore, which optcast's ranks meet in (a
program's store: they look each other's addresses up there on first use). Rank 0 exits
once every rank has joined, before any collective; the others then call a barrier, whose
first connections need those lookups. Each must raise at once (not at its deadline) with
the store's failure, and none may name another live rank as lost (before, each took the
rank it looked up for dead: "the store does not know where rank 2 listens").

    tests/torch_store_gone_test.py [--np N]

Exits 77 (skipped) with the reason where torch or the optcast_torch module is missing.
"""
import argparse
import datetime
import os
import re
import socket
import sys
import time

import torch_or_skip  # noqa: F401  (exits 77 where torch or optcast_torch is missing)
import torch.distributed as dist
import torch.multiprocessing as mp

DEADLINE_S = 30  # the group's timeout: an error must come well before it


def rank_main(rank, p, port, results):
    os.environ["OPTCAST_LOG"] = "off"
    dist.init_process_group("optcast", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=p,
                            timeout=datetime.timedelta(seconds=DEADLINE_S))
    # torch's own barrier in init_process_group reads the store after the last rank's
    # count: rank 0 (and its store) stays until the others are past it.
    if rank == 0:
        time.sleep(1.0)
        os._exit(0)
    time.sleep(1.5)
    start = time.monotonic()
    try:
        dist.barrier()
        results.put((rank, None, time.monotonic() - start))
    except Exception as e:  # noqa: BLE001  (the error is what is checked)
        results.put((rank, str(e), time.monotonic() - start))
    os._exit(0)  # destroying the group would ask the store that is gone


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=3, help="processes (default 3)")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    procs = [ctx.Process(target=rank_main, args=(r, a.np, port, results)) for r in range(a.np)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(timeout=2 * DEADLINE_S)
    bad = []
    for r, pr in enumerate(procs):
        if pr.is_alive():
            pr.kill()
            bad.append(f"rank {r}: still running after {2 * DEADLINE_S} s")
    got = {}
    while not results.empty():
        r, err, secs = results.get()
        got[r] = (err, secs)
    for r in range(1, a.np):
        if r not in got:
            bad.append(f"rank {r}: no result")
            continue
        err, secs = got[r]
        if err is None:
            bad.append(f"rank {r}: the barrier returned though rank 0 had gone")
            continue
        if "store" not in err:
            bad.append(f"rank {r}: the error does not say the store failed: {err}")
        blamed = {int(x) for x in re.findall(r"\brank (\d+)", err)} - {0}
        if blamed:
            bad.append(f"rank {r}: the error names live rank(s) {sorted(blamed)}: {err}")
        if secs > DEADLINE_S / 3:
            bad.append(f"rank {r}: the error came after {secs:.1f} s (the deadline is {DEADLINE_S} s): {err}")
        print(f"rank {r}: raised after {secs * 1e3:.1f} ms: {err}")
    for b in bad:
        print("FAIL", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
