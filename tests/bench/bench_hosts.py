"""The ring against the link: all-reduce bus bandwidth across 2, 3 and 4 hosts whose links are
limited to a given rate, for sparktrain's ring (sealed, and in the clear as with
``spark.sparktrain.collective.seal=false``), PyTorch's gloo all-reduce and TensorFlow's
collective all-reduce (MultiWorkerMirroredStrategy, RING implementation, over gRPC), all in one
run over the same hosts.

Each host is a network namespace on a private bridge (``tests/harness/netns.py``), one rank per
host, every link limited each way by a token bucket (``tc tbf``) to the rate. For each size
(float32 buffers, 1 KiB to 256 MiB) every contender makes the same number of timed calls,
each after a barrier, following warm-up calls; the figure is rank 0's median call time.
``busbw = 2(N-1)/N * bytes / time`` (NCCL's tests' definition: the bytes each link carries in
a ring all-reduce, per second), printed in Gbit/s and as a share of the link's rate. The
optional ``bf16`` contender is the sealed ring with the values on the wire as bfloat16 (the
trainer's ``gradient_wire="bf16"``): its figure counts the float32 bytes reduced, so it can
pass the link rate. The
"raw TCP" line is one plain TCP stream between two hosts over the same limited links, for what
the machine itself sustains.

Needs root and iproute2 (network namespaces and tc), TensorFlow in this interpreter's
environment and PyTorch in ``.venv-torch`` (``python tests/harness/torch_env.py``; without
it the gloo column is left out, saying so)::

    .venv/bin/python tests/bench/bench_hosts.py [--hosts 2 3 4] [--rates 1 10] [--max-mib 256]
        [--contenders sealed clear gloo tensorflow bf16] [--seconds 1.0]

A rank also runs this file, as ``bench_hosts.py --rank ...``, in its host.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
CONTENDERS = ["sealed", "clear", "gloo", "tensorflow"]
#: Contenders run only when named.
OPTIONAL = ["bf16"]
PORT = 29400
WARMUP = 2
RANK_TIMEOUT_S = 1800
#: How rank 0 starts the line of its figures (JSON) on its standard output.
RESULT = "RESULT "


# --- one rank, in its host ------------------------------------------------------------------------


def _median_times(call: Any, barrier: Any, sizes: list[int], iters: list[int], make: Any) -> dict[int, float]:
    times = {}
    for nbytes, count in zip(sizes, iters, strict=True):
        data = make(nbytes)
        for _ in range(WARMUP):
            call(data)
        samples = []
        for _ in range(count):
            barrier()
            start = time.perf_counter()
            call(data)
            samples.append(time.perf_counter() - start)
        times[nbytes] = statistics.median(samples)
    return times


def sparktrain_rank(spec: dict[str, Any]) -> dict[int, float]:
    import numpy as np

    from sparktrain._native import Communicator

    listener = socket.create_server((spec["peers"][spec["rank"]], PORT), backlog=16)
    peers = [f"{a}:{PORT}" for a in spec["peers"]]
    ring = Communicator(
        listener.fileno(), spec["rank"], peers, spec["secret"], 600.0, 1 << 20, 1, spec["sealed"]
    )

    def make(nbytes: int) -> Any:
        return np.ones(nbytes // 4, dtype=np.float32)

    wire = spec.get("wire", "native")

    def call(data: Any) -> None:
        ring.allreduce_at([data.__array_interface__["data"][0]], [data.size], "float32", "sum", wire)

    return _median_times(call, ring.barrier, spec["sizes"], spec["iters"], make)


def gloo_env(spec: dict[str, Any]) -> dict[str, str]:
    """The environment of ``torch.distributed``'s gloo group of a rank's ``spec``, its store
    on the first host."""
    return {
        "MASTER_ADDR": spec["peers"][0],
        "MASTER_PORT": str(PORT + 100),
        "WORLD_SIZE": str(len(spec["peers"])),
        "RANK": str(spec["rank"]),
        "GLOO_SOCKET_IFNAME": "eth0",
    }


def gloo_rank(spec: dict[str, Any]) -> dict[int, float]:
    import datetime

    os.environ.update(gloo_env(spec))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))

    def make(nbytes: int) -> Any:
        return torch.ones(nbytes // 4, dtype=torch.float32)

    times = _median_times(lambda t: dist.all_reduce(t), dist.barrier, spec["sizes"], spec["iters"], make)
    # Left to the interpreter's exit, the process group's threads abort the process.
    dist.barrier()
    dist.destroy_process_group()
    return times


def tensorflow_rank(spec: dict[str, Any]) -> dict[int, float]:
    from bench_allreduce import tensorflow_ring  # beside this file, on the path of its ranks

    tf, strategy, summing = tensorflow_ring([f"{a}:{PORT + 200}" for a in spec["peers"]], spec["rank"])
    steps: dict[int, Any] = {}

    def make(nbytes: int) -> Any:
        with strategy.scope():
            data = tf.ones([nbytes // 4], dtype=tf.float32)
        steps[id(data)] = summing()
        return data

    one = tf.ones([1], dtype=tf.float32)
    tiny = summing()

    # TensorFlow has no barrier of its own outside a step: a one-float all-reduce serves.
    return _median_times(
        lambda data: steps[id(data)](data).numpy(),
        lambda: tiny(one).numpy(),
        spec["sizes"],
        spec["iters"],
        make,
    )


def rank_main(spec: dict[str, Any]) -> None:
    runners = {"sparktrain": sparktrain_rank, "gloo": gloo_rank, "tensorflow": tensorflow_rank}
    times = runners[spec["kind"]](spec)
    if spec["rank"] == 0:
        print(RESULT + json.dumps({str(k): v for k, v in times.items()}), flush=True)


# --- the driver: hosts, links, contenders -----------------------------------------------------------


def iterations(nbytes: int, n: int, rate_bits: float, seconds: float) -> int:
    """Timed calls for a size: about ``seconds`` of link time, 3 to 50 calls."""
    per_call = 2 * (n - 1) / n * nbytes * 8 / rate_bits
    return max(3, min(50, int(seconds / max(per_call, 1e-6))))


def run_ranks(
    hosts: list[Any], kind: str, python: str, spec: dict[str, Any], script: str = __file__
) -> dict[str, Any]:
    """Runs one contender's ranks, one per host, each as ``script --rank SPEC``; returns the
    figures rank 0 printed."""
    procs = []
    for rank, host in enumerate(hosts):
        rank_spec = {**spec, "kind": kind, "rank": rank, "peers": [h.address for h in hosts]}
        procs.append(
            host.popen(
                [python, str(Path(script).resolve()), "--rank", json.dumps(rank_spec)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + RANK_TIMEOUT_S
    outputs = []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise SystemExit(f"{kind}: rank {rank} did not finish within {RANK_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            for p in procs:
                p.kill()
            raise SystemExit(f"{kind}: rank {rank} failed ({proc.returncode}):\n{err[-3000:]}")
        outputs.append(out)
    line = next(line for line in outputs[0].splitlines() if line.startswith(RESULT))
    figures: dict[str, Any] = json.loads(line[len(RESULT) :])
    return figures


def run_as_rank(rank: str | None, rank_main: Any, script: str) -> bool:
    """Whether this process is one rank (``--rank SPEC`` given), run by ``rank_main`` by now;
    otherwise the driver's, which exits with the reason where network namespaces cannot be
    made."""
    if rank is not None:
        rank_main(json.loads(rank))
        return True
    from harness import netns

    reason = netns.unavailable()
    if reason is not None:
        raise SystemExit(f"{Path(script).name} needs network namespaces: {reason}")
    return False


def raw_tcp_gbits(sender: Any, receiver: Any, seconds: float = 3.0) -> float:
    """One plain TCP stream from ``sender`` to ``receiver`` for ``seconds``: Gbit/s received."""
    serve = (
        "import socket,time,sys\n"
        f"s=socket.create_server(('{receiver.address}',{PORT + 300}));c,_=s.accept();n=0;t=None\n"
        "while (b:=c.recv(1<<20)):\n n+=len(b); t=t or time.perf_counter()\n"
        "print(n*8/(time.perf_counter()-t)/1e9)"
    )
    send = (
        "import socket,time\n"
        f"c=socket.create_connection(('{receiver.address}',{PORT + 300}))\n"
        f"b=b'x'*(1<<20);e=time.time()+{seconds}\n"
        "while time.time()<e: c.sendall(b)\n"
        "c.close()"
    )
    server = receiver.popen([sys.executable, "-c", serve], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    sender.run([sys.executable, "-c", send], timeout=seconds + 30)
    out, _ = server.communicate(timeout=30)
    return float(out.strip())


def human(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes >> 20} MiB"
    return f"{nbytes >> 10} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 10.0], help="link rates, Gbit/s")
    parser.add_argument("--max-mib", type=int, default=256)
    parser.add_argument("--min-kib", type=int, default=1)
    parser.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS + OPTIONAL)
    parser.add_argument("--seconds", type=float, default=1.0, help="link time per size and contender")
    parser.add_argument("--json", help="also write every figure to this file")
    options = parser.parse_args()
    if run_as_rank(options.rank, rank_main, __file__):
        return

    from harness import netns

    sizes = [s for s in SIZES if (options.min_kib << 10) <= s <= options.max_mib << 20]
    contenders = list(options.contenders)
    torch_python = ROOT / ".venv-torch" / "bin" / "python"
    if "gloo" in contenders and not torch_python.exists():
        print(
            f"gloo left out: {torch_python} is missing (python tests/harness/torch_env.py)", file=sys.stderr
        )
        contenders.remove("gloo")
    from sparktrain._native import generate_secret

    figures: list[dict[str, Any]] = []
    print(f"machine: {os.cpu_count()} cores; one rank per host; float32 SUM; rank 0's median call time")
    with netns.Network("10.213.9") as net:
        hosts = [net.add_host(f"b{i}") for i in range(max(options.hosts))]
        for rate in options.rates:
            bits = rate * 1e9
            for host in hosts:
                host.limit(int(bits))
            raw = raw_tcp_gbits(hosts[0], hosts[1])
            for n in options.hosts:
                ring_hosts = hosts[:n]
                factor = 2 * (n - 1) / n
                results: dict[str, dict[int, float]] = {}
                for name in contenders:
                    spec = {"sizes": sizes, "iters": [iterations(s, n, bits, options.seconds) for s in sizes]}
                    if name in ("sealed", "clear", "bf16"):
                        spec.update(secret=generate_secret(), sealed=name != "clear")
                        spec.update(wire="bf16" if name == "bf16" else "native")
                        times = run_ranks(ring_hosts, "sparktrain", sys.executable, spec)
                    elif name == "gloo":
                        times = run_ranks(ring_hosts, "gloo", str(torch_python), spec)
                    else:
                        times = run_ranks(ring_hosts, "tensorflow", sys.executable, spec)
                    results[name] = {int(k): v for k, v in times.items()}
                print(
                    f"\nN={n} hosts, links {rate:g} Gbit/s each way (raw TCP stream: {raw:.2f} Gbit/s); "
                    "bus bandwidth in Gbit/s (share of the link rate)"
                )
                labels = {"sealed": "sparktrain sealed", "clear": "sparktrain clear", "gloo": "PyTorch gloo",
                          "tensorflow": "TensorFlow RING", "bf16": "sealed, bf16 wire"}  # fmt: skip
                print(f"{'size':>8} | " + " | ".join(f"{labels[c]:>18}" for c in contenders))
                for nbytes in sizes:
                    cells = []
                    for c in contenders:
                        busbw = factor * nbytes * 8 / results[c][nbytes] / 1e9
                        cells.append(f"{busbw:8.3f} ({busbw / rate:4.0%})")
                        figure = {
                            "hosts": n,
                            "rate_gbit": rate,
                            "raw_gbit": raw,
                            "bytes": nbytes,
                            "contender": c,
                        }
                        figures.append({**figure, "seconds": results[c][nbytes], "busbw_gbit": busbw})
                    print(f"{human(nbytes):>8} | " + " | ".join(f"{cell:>18}" for cell in cells), flush=True)
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
