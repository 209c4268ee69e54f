"""PyTorch's gloo all-reduce beside ``gpu_check allreduce`` in ``tests/gpu/check.sh``: N ranks as
processes on 127.0.0.1, float32 sums of the same sizes, the median call time on rank 0 after
three warm-up calls (10 timed calls from 16 MiB up, 100 below, each after a barrier), and the
bus bandwidth ``2(N-1)/N * bytes / time``.

Usage: python gloo_peer.py RANKS[,RANKS...] MIB[,MIB...]   Prints a ``RESULT`` JSON line per
rank count and size. Needs only PyTorch.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, n: int, port: int, sizes: list[int], out: mp.SimpleQueue) -> None:  # type: ignore[type-arg]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=datetime.timedelta(seconds=120))
    for nbytes in sizes:
        data = torch.ones(nbytes // 4, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(data)
        samples = []
        for _ in range(10 if nbytes >= 16 << 20 else 100):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(data)
            samples.append(time.perf_counter() - start)
        if rank == 0:
            out.put((nbytes, statistics.median(samples)))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ranks = [int(n) for n in sys.argv[1].split(",")]
    sizes = [int(m) << 20 for m in sys.argv[2].split(",")]
    for n in ranks:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        ctx = mp.get_context("spawn")
        out = ctx.SimpleQueue()
        procs = [ctx.Process(target=rank_main, args=(r, n, port, sizes, out), daemon=True) for r in range(n)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + 600
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(p.exitcode != 0 for p in procs):
            for p in procs:
                p.kill()  # a rank still waiting on one that failed
            sys.exit(f"a gloo rank failed or hung with {n} ranks: {[p.exitcode for p in procs]}")
        while not out.empty():
            nbytes, seconds = out.get()
            busbw = 2 * (n - 1) / n * nbytes / seconds / 1e9
            line = {"mode": "allreduce", "contender": "gloo", "ranks": n, "bytes": nbytes}
            print("RESULT " + json.dumps({**line, "seconds": seconds, "busbw_gbs": busbw}), flush=True)


if __name__ == "__main__":
    main()
