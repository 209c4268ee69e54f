"""All-reduce bus bandwidth: sparktrain's ring over TCP against TensorFlow's collective
all-reduce (MultiWorkerMirroredStrategy's CollectiveAllReduce, RING implementation, over gRPC),
with N local processes on 127.0.0.1, in one run; single-process memcpy as the physical
reference.

For each size (float32 buffers, 4 KiB to 256 MiB), each contender runs a few warm-up calls and
then times ``--iters`` calls; the figure is the median call time on rank 0. sparktrain runs
three times: as configured by default, where ranks on one host connect through unix-domain
sockets, unsealed; and over TCP as between hosts (``spark.sparktrain.collective.local=false``),
with its frames sealed (encrypted and authenticated, the default) and in the clear
(``spark.sparktrain.collective.seal=false``).
``busbw = bytes / time * 2(N-1)/N``, the traffic each link carries in a ring algorithm.

    .venv/bin/python tests/bench/bench_allreduce.py [--ranks 2 4] [--max-mib 256] [--iters 10]
        [--streams 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import socket
import statistics
import sys
import time
from typing import Any

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]


def iterations(nbytes: int, iters: int) -> int:
    return iters if nbytes >= 16 << 20 else iters * 10


def sparktrain_rank(
    rank: int,
    peers: list[str],
    listener: socket.socket,
    secret: str,
    sizes: list[int],
    iters: int,
    streams: int,
    sealed: bool,
    local: bool,
    out: Any,
) -> None:
    import numpy as np

    from sparktrain._native import Communicator

    ring = Communicator(listener.fileno(), rank, peers, secret, 120.0, 1 << 20, streams, sealed, local)
    times = {}
    for nbytes in sizes:
        data = np.ones(nbytes // 4, dtype=np.float32)
        address = data.__array_interface__["data"][0]
        for _ in range(3):
            ring.allreduce_at([address], [data.size], "float32", "sum")
        samples = []
        for _ in range(iterations(nbytes, iters)):
            ring.barrier()
            start = time.perf_counter()
            ring.allreduce_at([address], [data.size], "float32", "sum")
            samples.append(time.perf_counter() - start)
        times[nbytes] = statistics.median(samples)
    if rank == 0:
        out.put(times)


def collect(out: Any, procs: list[Any]) -> dict[int, float]:
    """Rank 0's timings; fails at once when any rank dies instead of waiting for it."""
    while True:
        try:
            return out.get(timeout=1)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    p.terminate()
                sys.exit(f"a benchmark rank failed with exit code {dead[0].exitcode}")


def run_sparktrain(
    n: int, sizes: list[int], iters: int, streams: int, sealed: bool, local: bool = False
) -> dict[int, float]:
    from sparktrain._native import generate_secret

    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    peers = [f"127.0.0.1:{s.getsockname()[1]}" for s in listeners]
    secret = generate_secret()
    ctx = mp.get_context("fork")  # the listeners are inherited; nothing else runs yet
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=sparktrain_rank,
            args=(r, peers, listeners[r], secret, sizes, iters, streams, sealed, local, out),
        )
        for r in range(n)
    ]
    for p in procs:
        p.start()
    times = collect(out, procs)
    for p in procs:
        p.join()
    return times


def tensorflow_ring(workers: list[str], rank: int) -> tuple[Any, Any, Any]:
    """TensorFlow (imported here, once its environment is set), ``MultiWorkerMirroredStrategy``
    with the RING implementation as worker ``rank`` of ``workers`` (``host:port``), and a
    function that makes a new ``tf.function`` summing a tensor over every worker."""
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
    )
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def summing() -> Any:
        @tf.function
        def step(x: Any) -> Any:
            def replica(v: Any) -> Any:
                # The identity gives the value a replica-local device, which the reduction needs.
                context = tf.distribute.get_replica_context()
                return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(v))

            return strategy.run(replica, args=(x,))

        return step

    return tf, strategy, summing


def tensorflow_rank(rank: int, ports: list[int], sizes: list[int], iters: int, out: Any) -> None:
    tf, strategy, summing = tensorflow_ring([f"127.0.0.1:{p}" for p in ports], rank)
    times = {}
    for nbytes in sizes:
        with strategy.scope():
            data = tf.ones([nbytes // 4], dtype=tf.float32)
        step = summing()
        for _ in range(3):
            step(data).numpy()
        samples = []
        for _ in range(iterations(nbytes, iters)):
            start = time.perf_counter()
            step(data).numpy()
            samples.append(time.perf_counter() - start)
        times[nbytes] = statistics.median(samples)
    if rank == 0:
        out.put(times)


def run_tensorflow(n: int, sizes: list[int], iters: int) -> dict[int, float]:
    probes = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    ports = [s.getsockname()[1] for s in probes]
    for s in probes:
        s.close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=tensorflow_rank, args=(r, ports, sizes, iters, out)) for r in range(n)]
    for p in procs:
        p.start()
    times = collect(out, procs)
    for p in procs:
        p.terminate()
        p.join()
    return times


def memcpy_bandwidth(nbytes: int) -> float:
    import numpy as np

    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    samples = []
    for _ in range(max(3, (64 << 20) // nbytes)):
        start = time.perf_counter()
        np.copyto(dst, src)
        samples.append(time.perf_counter() - start)
    return nbytes / statistics.median(samples)


def human(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--max-mib", type=int, default=256)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--streams", type=int, default=1, help="sparktrain's parallel rings")
    options = parser.parse_args()
    sizes = [s for s in SIZES if s <= options.max_mib << 20]

    for n in options.ranks:
        on_host = run_sparktrain(n, sizes, options.iters, options.streams, sealed=True, local=True)
        ours = run_sparktrain(n, sizes, options.iters, options.streams, sealed=True)
        clear = run_sparktrain(n, sizes, options.iters, options.streams, sealed=False)
        theirs = run_tensorflow(n, sizes, options.iters)
        factor = 2 * (n - 1) / n
        print(
            f"\nall-reduce, float32 SUM, N={n} processes on 127.0.0.1, {options.streams} sparktrain"
            " ring(s) (median call time on rank 0)"
        )
        print(
            f"{'size':>8} | {'sparktrain, one host':>22} | {'sparktrain, TCP sealed':>22} | "
            f"{'sparktrain, TCP clear':>22} | {'TensorFlow RING':>22} | {'host':>6} | {'ratio':>6} | "
            f"{'clear':>6} | memcpy GB/s"
        )
        for nbytes in sizes:
            h, a, c, b = on_host[nbytes], ours[nbytes], clear[nbytes], theirs[nbytes]
            bw = [nbytes / t * factor / 1e9 for t in (h, a, c, b)]
            memcpy = memcpy_bandwidth(nbytes) / 1e9
            print(
                f"{human(nbytes):>8} | {h * 1e3:9.3f} ms {bw[0]:6.2f} GB/s"
                f" | {a * 1e3:9.3f} ms {bw[1]:6.2f} GB/s | {c * 1e3:9.3f} ms {bw[2]:6.2f} GB/s"
                f" | {b * 1e3:9.3f} ms {bw[3]:6.2f} GB/s"
                f" | {b / h:5.1f}x | {b / a:5.1f}x | {b / c:5.1f}x | {memcpy:.2f}"
            )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
